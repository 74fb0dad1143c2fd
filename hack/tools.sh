#!/usr/bin/env bash
# hack/tools.sh [--cached] NAME: build (or find) a test tool in a per-user
# cache keyed by version and print the absolute path of its binary on stdout.
# Idempotent: the second run for the same version is a no-op. Progress goes to
# stderr.
#
# --cached: never build; print the path if the binary is cached, else exit 3.
# Tests use it to run against a tool when it is there and skip otherwise
# without paying minutes for a build (see internal/testenv).
#
# Tools:
#   versitygw   S3 server (Apache-2.0) used by the S3 blob store tests
#   terraform   Terraform CLI v1.5.7 (the last MPL-2.0 release) for the
#               provider's acceptance tests in terraform/ (~525 s CPU cold)
#
# The cache lives in ${SLESS_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sless-tools}.
set -euo pipefail

VERSITYGW_VERSION=v1.8.0
TERRAFORM_VERSION=v1.5.7

cache="${SLESS_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sless-tools}"

log() { echo "tools.sh: $*" >&2; }

cached_only=false
if [[ "${1:-}" == --cached ]]; then
	cached_only=true
	shift
fi

# go_install PKG VERSION NAME: install PKG@VERSION into $cache/NAME-VERSION/bin.
go_install() {
	local pkg=$1 version=$2 name=$3
	local dir="$cache/$name-$version"
	local bin="$dir/bin/$name"
	if [[ ! -x "$bin" ]]; then
		if $cached_only; then
			log "$name $version is not built yet; run hack/tools.sh $name"
			exit 3
		fi
		mkdir -p "$dir"
		# Test binaries run in parallel and may all ask for the tool at once:
		# one builds, the others wait for it rather than build it again.
		exec 9>"$dir/build.lock"
		flock 9
		if [[ ! -x "$bin" ]]; then
			log "building $name $version (first run only; takes a few minutes)"
			local tmp
			tmp=$(mktemp -d "$dir/tmp.XXXXXX")
			GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS=-mod=mod go install -trimpath -ldflags "-s -w" "$pkg@$version" >&2
			mkdir -p "$dir/bin"
			mv "$tmp/$name" "$bin"
			rm -rf "$tmp"
		fi
		exec 9>&-
	fi
	echo "$bin"
}

case "${1:-}" in
versitygw)
	go_install github.com/versity/versitygw/cmd/versitygw "$VERSITYGW_VERSION" versitygw
	;;
terraform)
	go_install github.com/hashicorp/terraform "$TERRAFORM_VERSION" terraform
	;;
*)
	echo "usage: hack/tools.sh [--cached] versitygw|terraform" >&2
	exit 2
	;;
esac
