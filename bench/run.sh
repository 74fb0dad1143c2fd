#!/usr/bin/env bash
# bench/run.sh [flags of bench/main.go]: installs wrk when missing and runs the
# data-plane benchmarks, printing a markdown table (-write also stores it in
# bench/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v wrk >/dev/null; then
	echo "bench: installing wrk" >&2
	apt-get install -y wrk >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y wrk >/dev/null; }
fi
exec go run ./bench "$@"
