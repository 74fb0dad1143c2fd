#!/bin/sh
# deploy/quickstart/credentials.sh: writes the quickstart's credentials into
# credentials/ beside this script, random and readable by you only:
#
#   credentials/postgres.env  the PostgreSQL password
#   credentials/minio.env     MinIO's root user and password
#   credentials/sless.env     what sless connects with, and its admin API token
#
# A file that exists is kept, so running it again (an upgrade) changes no
# credential: PostgreSQL and MinIO take theirs only when their volumes are
# first initialised. Then: kubectl apply -k deploy/quickstart
set -eu
cd "$(dirname "$0")"
umask 077
mkdir -p credentials

# random N: 2N lower-case hex digits from the kernel's random source.
random() {
	od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'
}

if [ -f credentials/sless.env ] || [ -f credentials/postgres.env ] || [ -f credentials/minio.env ]; then
	for f in sless postgres minio; do
		if [ ! -f "credentials/$f.env" ]; then
			echo "credentials.sh: credentials/$f.env is missing but others exist; remove credentials/ to start afresh (this loses the data's passwords)" >&2
			exit 1
		fi
	done
	echo "credentials.sh: keeping the credentials in $(pwd)/credentials" >&2
	exit 0
fi

postgres_password=$(random 24)
minio_password=$(random 24)
api_token=$(random 32)

cat >credentials/postgres.env <<END
POSTGRES_PASSWORD=$postgres_password
END
cat >credentials/minio.env <<END
MINIO_ROOT_USER=sless
MINIO_ROOT_PASSWORD=$minio_password
END
cat >credentials/sless.env <<END
SLESS_DATABASE_URL=postgres://sless:$postgres_password@postgres.sless.svc:5432/sless?sslmode=disable
SLESS_BLOB_URL=s3://sless?endpoint=minio.sless.svc:9000&region=us-east-1&insecure=true&path_style=true
SLESS_S3_ACCESS_KEY=sless
SLESS_S3_SECRET_KEY=$minio_password
SLESS_API_TOKEN=$api_token
END
echo "credentials.sh: wrote $(pwd)/credentials; the admin API token is SLESS_API_TOKEN in credentials/sless.env" >&2
