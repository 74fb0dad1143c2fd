#!/usr/bin/env bash
# hack/screenshots.sh: regenerate the console's screenshots in docs/
# (docs/console-*.png) by running its browser test, which saves the main
# pages as it goes. Installs chromium and playwright-core first, as
# hack/tools.sh does for CI.
set -euo pipefail
cd "$(dirname "$0")/.."
hack/tools.sh chromium >/dev/null
hack/tools.sh playwright >/dev/null
SLESS_REQUIRE_SERVICES=1 SLESS_CONSOLE_SCREENSHOTS="$PWD/docs" go test ./e2e -run '^TestConsole$' -count=1
ls docs/console-*.png
