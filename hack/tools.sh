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
#   victoriametrics
#               VictoriaMetrics single-node (Apache-2.0), the receiver of the
#               metrics push tests and the query engine of the dashboard's
#               tests (~60 s CPU cold)
#   envtest     kube-apiserver v1.34.4 and etcd v3.6.16 for controller-runtime's
#               envtest; prints the directory to use as KUBEBUILDER_ASSETS
#               (~900 s CPU and 1.8 GB of memory cold)
#   chromium    Debian's chromium for the console's browser tests, installed
#               with apt-get (as root) when missing; prints /usr/bin/chromium
#   playwright  playwright-core, at the version ui/e2e/package-lock.json pins,
#               installed with npm ci (no browser download: the tests drive
#               Debian's chromium); prints the package's directory
#   uvloop      Debian's python3-uvloop, which the Python wrapper runs on when
#               its interpreter has it, installed with apt-get (as root) and,
#               for a python3.11 on PATH that is not Debian's (pyenv, say),
#               copied into that interpreter's site-packages; prints the
#               package's directory as python3.11 imports it
#
# The cache lives in ${SLESS_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sless-tools}.
set -euo pipefail

VERSITYGW_VERSION=v1.8.0
TERRAFORM_VERSION=v1.5.7
KUBERNETES_VERSION=v1.34.4
ETCD_VERSION=v3.6.16
VICTORIAMETRICS_VERSION=v1.151.0

cache="${SLESS_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sless-tools}"

log() { echo "tools.sh: $*" >&2; }

cached_only=false
if [[ "${1:-}" == --cached ]]; then
	cached_only=true
	shift
fi

# build_locked DIR NAME: call before building NAME into DIR: exits 3 under
# --cached, else takes DIR's build lock (fd 9), so that test binaries that ask
# for a tool at once build it once; the caller checks again for the binary,
# which another may have built meanwhile, and closes fd 9.
build_locked() {
	local dir=$1 name=$2
	if $cached_only; then
		log "$name is not built yet; run hack/tools.sh $name"
		exit 3
	fi
	mkdir -p "$dir"
	exec 9>"$dir/build.lock"
	flock 9
}

# go_install PKG VERSION NAME [BIN]: install PKG@VERSION, whose command is
# named BIN (default NAME), into $cache/NAME-VERSION/bin/NAME.
go_install() {
	local pkg=$1 version=$2 name=$3 command=${4:-$3}
	local dir="$cache/$name-$version"
	local bin="$dir/bin/$name"
	if [[ ! -x "$bin" ]]; then
		build_locked "$dir" "$name"
		if [[ ! -x "$bin" ]]; then
			log "building $name $version (first run only; takes a few minutes)"
			local tmp
			tmp=$(mktemp -d "$dir/tmp.XXXXXX")
			GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS=-mod=mod go install -trimpath -ldflags "-s -w" "$pkg@$version" >&2
			mkdir -p "$dir/bin"
			mv "$tmp/$command" "$bin"
			rm -rf "$tmp"
		fi
		exec 9>&-
	fi
	echo "$bin"
}

# envtest: kube-apiserver and etcd from the Go module proxy. Neither installs
# with `go install` (their modules have replace directives), so each is
# built in a scratch module: kube-apiserver with every staging module of
# k8s.io/kubernetes replaced by its published version (but the two sample
# modules, which the proxy does not serve and nothing needs), etcd as a
# plain dependency. The result is cached by version.
envtest() {
	local dir="$cache/envtest-$KUBERNETES_VERSION-etcd-$ETCD_VERSION"
	local bin="$dir/bin"
	if [[ ! -x "$bin/kube-apiserver" || ! -x "$bin/etcd" ]]; then
		build_locked "$dir" envtest
		if [[ ! -x "$bin/kube-apiserver" || ! -x "$bin/etcd" ]]; then
			log "building kube-apiserver $KUBERNETES_VERSION and etcd $ETCD_VERSION (first run only; ~15 minutes on 2 cores)"
			local src="$dir/src" k8s_mod minor=${KUBERNETES_VERSION#v1.}
			minor=${minor%%.*}
			rm -rf "$src" && mkdir -p "$src/apiserver" "$src/etcd" "$dir/tmp"
			k8s_mod=$(cd "$src" && go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" |
				sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
			{
				echo "module sless.kube5s.ru/tools/kube-apiserver"
				grep -E '^(go|godebug) ' "$k8s_mod"
				echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
				grep -E '^[[:space:]]*k8s\.io/[a-z0-9-]+ => \./staging/' "$k8s_mod" | awk '{print $1}' |
					grep -vE '^k8s\.io/sample-(cli-plugin|controller)$' |
					while read -r m; do echo "replace $m => $m v0.${KUBERNETES_VERSION#v1.}"; done
			} >"$src/apiserver/go.mod"
			(
				cd "$src/apiserver"
				GOFLAGS=-mod=mod go get "k8s.io/kubernetes/cmd/kube-apiserver@$KUBERNETES_VERSION" >&2
				CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$dir/tmp/kube-apiserver" -ldflags "-s -w \
					-X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION \
					-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
					-X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION" \
					k8s.io/kubernetes/cmd/kube-apiserver >&2
			)
			printf 'module sless.kube5s.ru/tools/etcd\ngo 1.24\n' >"$src/etcd/go.mod"
			(
				cd "$src/etcd"
				GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
				CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$dir/tmp/etcd" -ldflags "-s -w" go.etcd.io/etcd/server/v3 >&2
			)
			mkdir -p "$bin"
			mv "$dir/tmp/kube-apiserver" "$dir/tmp/etcd" "$bin/"
			rm -rf "$dir/tmp" "$src"
		fi
		exec 9>&-
	fi
	echo "$bin"
}

# chromium: Debian's package. It is not cached by this script (apt-get
# owns it); --cached only checks that it is there.
chromium() {
	local bin=/usr/bin/chromium
	if [[ ! -x "$bin" ]]; then
		if $cached_only; then
			log "chromium is not installed; run hack/tools.sh chromium"
			exit 3
		fi
		log "installing chromium with apt-get (first run only)"
		apt-get update >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >&2
	fi
	echo "$bin"
}

# playwright: ui/e2e's lock file installed with npm ci into a directory keyed
# by the lock file's hash, so that a new pin installs anew.
playwright() {
	local src key dir
	src="$(cd "$(dirname "$0")/.." && pwd)/ui/e2e"
	key=$(sha256sum "$src/package-lock.json" | cut -c1-12)
	dir="$cache/playwright-$key"
	if [[ ! -f "$dir/node_modules/playwright-core/package.json" ]]; then
		build_locked "$dir" playwright
		if [[ ! -f "$dir/node_modules/playwright-core/package.json" ]]; then
			log "installing playwright-core with npm (first run only)"
			cp "$src/package.json" "$src/package-lock.json" "$dir/"
			(cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --ignore-scripts --no-audit --no-fund >&2)
		fi
		exec 9>&-
	fi
	echo "$dir/node_modules/playwright-core"
}

# uvloop: see the list of tools above. A package built for Debian's CPython
# 3.11 loads in any CPython 3.11 (the same ABI); the copy is checked by
# importing it, and removed if that fails. apt-get and the copy own the
# files: nothing is cached by this script.
uvloop() {
	local python debian=/usr/lib/python3/dist-packages/uvloop site
	python=$(command -v python3.11) || {
		log "python3.11 is not on PATH"
		exit 1
	}
	local import='import os, uvloop; print(os.path.dirname(uvloop.__file__))'
	if "$python" -c "$import" 2>/dev/null; then
		return
	fi
	if $cached_only; then
		log "uvloop is not installed for $python; run hack/tools.sh uvloop"
		exit 3
	fi
	if [[ ! -f "$debian/__init__.py" ]]; then
		log "installing python3-uvloop with apt-get (first run only)"
		apt-get update >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-uvloop >&2
	fi
	if ! "$python" -c "$import" 2>/dev/null; then
		site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
		log "copying Debian's uvloop into $site"
		rm -rf "$site/uvloop"
		cp -r "$debian" "$site/uvloop"
		if ! "$python" -c "$import"; then
			rm -rf "$site/uvloop"
			log "$python cannot load Debian's uvloop (it is built for CPython 3.11)"
			exit 1
		fi
	fi
}

case "${1:-}" in
chromium)
	chromium
	;;
playwright)
	playwright
	;;
uvloop)
	uvloop
	;;
versitygw)
	go_install github.com/versity/versitygw/cmd/versitygw "$VERSITYGW_VERSION" versitygw
	;;
terraform)
	go_install github.com/hashicorp/terraform "$TERRAFORM_VERSION" terraform
	;;
envtest)
	envtest
	;;
victoriametrics)
	go_install github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics "$VICTORIAMETRICS_VERSION" victoriametrics victoria-metrics
	;;
*)
	echo "usage: hack/tools.sh [--cached] versitygw|terraform|envtest|victoriametrics|chromium|playwright|uvloop" >&2
	exit 2
	;;
esac
