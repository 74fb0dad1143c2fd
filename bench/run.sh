#!/usr/bin/env bash
# bench/run.sh [flags of bench/main.go]: installs wrk, nginx and uvloop when missing and
# runs the data-plane benchmarks, printing markdown tables (-write also stores
# them in bench/README.md, -quick runs everything in under two minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
install() { # install PACKAGE: apt-get install, with an index update when the package is unknown
	echo "bench: installing $1" >&2
	apt-get install -y "$1" >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y "$1" >/dev/null; }
}
command -v wrk >/dev/null || install wrk
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || install nginx-light
# The Python wrapper runs on uvloop when python3.11 has it, as a user's would.
hack/tools.sh uvloop >/dev/null
exec go run ./bench "$@"
