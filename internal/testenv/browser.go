package testenv

import (
	"os/exec"
	"sync"
	"testing"
)

// Browser is what the console's browser tests drive: Debian's chromium and
// playwright-core.
type Browser struct {
	// Chromium is the browser's binary.
	Chromium string
	// Playwright is playwright-core's package directory.
	Playwright string
	// Node is the node binary that runs the test scripts.
	Node string
}

// NeedBrowser returns the browser tools that hack/tools.sh installs
// (`hack/tools.sh chromium`, `hack/tools.sh playwright`): with
// SLESS_REQUIRE_SERVICES=1 they are installed if missing; otherwise a test
// runs only if they are there already, and is Unavailable if not.
func NeedBrowser(t testing.TB) Browser {
	t.Helper()
	build := Required(t)
	root := RepoRoot(t)
	browserTools.once.Do(func() {
		b := &browserTools.b
		if b.Node, browserTools.err = exec.LookPath("node"); browserTools.err != nil {
			return
		}
		if b.Chromium, browserTools.err = Tool(root, "chromium", build); browserTools.err != nil {
			return
		}
		b.Playwright, browserTools.err = Tool(root, "playwright", build)
	})
	if browserTools.err != nil {
		Unavailable(t, "browser tests: %v", browserTools.err)
	}
	return browserTools.b
}

// browserTools caches the tools' paths for the test binary.
var browserTools struct {
	once sync.Once
	b    Browser
	err  error
}
