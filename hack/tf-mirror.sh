#!/usr/bin/env bash
# hack/tf-mirror.sh [--platforms LIST] [--gpg-key KEY] VERSION OUTDIR:
# build terraform-provider-sless VERSION and lay it out for installation.
#
#   OUTDIR/release/   what a release of naeel/sless publishes: one zip per
#                     platform (terraform-provider-sless_VERSION_OS_ARCH.zip,
#                     holding terraform-provider-sless_vVERSION), the
#                     _manifest.json, _SHA256SUMS, and _SHA256SUMS.sig (a
#                     binary detached GPG signature) when --gpg-key names a
#                     secret key of gpg's keyring (GNUPGHOME)
#   OUTDIR/mirror/    a provider mirror: registry.terraform.io/naeel/sless/
#                     with the zips (the packed layout of a filesystem_mirror)
#                     and index.json / VERSION.json, the files a
#                     network_mirror serves, naming the same zips
#
# --platforms is a comma-separated list of OS_ARCH (default: linux_amd64,
# linux_arm64, darwin_amd64, darwin_arm64; the Go client finds the local
# server with flock(2), so Windows is not a platform of it yet). A terraform CLI
# installs from the mirror offline with a CLI configuration such as
#
#   provider_installation {
#     filesystem_mirror { path = "OUTDIR/mirror" }
#   }
set -euo pipefail

platforms=linux_amd64,linux_arm64,darwin_amd64,darwin_arm64
gpg_key=
while [[ "${1:-}" == --* ]]; do
	case "$1" in
	--platforms) platforms=$2; shift 2 ;;
	--gpg-key) gpg_key=$2; shift 2 ;;
	*) echo "tf-mirror.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
if [[ $# -ne 2 ]]; then
	echo "usage: hack/tf-mirror.sh [--platforms OS_ARCH,...] [--gpg-key KEY] VERSION OUTDIR" >&2
	exit 2
fi
version=${1#v}
out=$2
if [[ ! "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "tf-mirror.sh: version $1 is not a semantic version such as 0.1.0" >&2
	exit 2
fi

src="$(cd "$(dirname "$0")/../terraform" && pwd)"
name=terraform-provider-sless
release="$out/release"
mirror="$out/mirror/registry.terraform.io/naeel/sless"
mkdir -p "$release" "$mirror"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

log() { echo "tf-mirror.sh: $*" >&2; }

archives=()
IFS=, read -ra targets <<<"$platforms"
for target in "${targets[@]}"; do
	os=${target%_*} arch=${target#*_}
	exe="${name}_v${version}"
	log "building $target"
	mkdir -p "$tmp/$target"
	(cd "$src" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath \
		-ldflags "-s -w -X main.version=$version" -o "$tmp/$target/$exe" .)
	zipname="${name}_${version}_${target}.zip"
	rm -f "$release/$zipname"
	(cd "$tmp/$target" && python3 -m zipfile -c "$tmp/$zipname" "$exe")
	mv "$tmp/$zipname" "$release/$zipname"
	archives+=("$zipname")
done

# The plugin protocol the framework serves.
printf '{\n  "version": 1,\n  "metadata": {\n    "protocol_versions": ["6.0"]\n  }\n}\n' >"$release/${name}_${version}_manifest.json"
sums="${name}_${version}_SHA256SUMS"
(cd "$release" && sha256sum "${archives[@]}" "${name}_${version}_manifest.json" >"$sums")
if [[ -n "$gpg_key" ]]; then
	log "signing $sums with $gpg_key"
	rm -f "$release/$sums.sig"
	gpg --batch --yes --local-user "$gpg_key" --detach-sign --output "$release/$sums.sig" "$release/$sums"
fi

# The mirror: the same zips, and the JSON a network mirror answers with.
entries=()
for zipname in "${archives[@]}"; do
	cp "$release/$zipname" "$mirror/$zipname"
	target=${zipname#"${name}_${version}_"}
	target=${target%.zip}
	sum=$(sha256sum "$mirror/$zipname" | cut -d' ' -f1)
	entries+=("    \"$target\": {\"url\": \"$zipname\", \"hashes\": [\"zh:$sum\"]}")
done
{
	echo '{'
	echo '  "archives": {'
	(IFS=$'\n'; echo "${entries[*]}") | sed '$!s/$/,/'
	echo '  }'
	echo '}'
} >"$mirror/$version.json"
# index.json lists every version laid out in this mirror.
versions=$(cd "$mirror" && ls -1 -- *.json | grep -v '^index\.json$' | sed 's/\.json$//' | sort -V)
{
	echo '{'
	echo '  "versions": {'
	sed 's/.*/    "&": {}/' <<<"$versions" | sed '$!s/$/,/'
	echo '  }'
	echo '}'
} >"$mirror/index.json"
log "release in $release, mirror in $out/mirror"
