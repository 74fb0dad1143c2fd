package e2e

import (
	"testing"
)

// TestPrewarmLongerThanTheIdleTimeout prewarms a cron run 5 s ahead on a
// server whose instances stop after 1 s idle: the prewarmed instance must
// wait for its run, which is then warm.
func TestPrewarmLongerThanTheIdleTimeout(t *testing.T) {
	s := startServer(t, serverOptions{env: []string{"SLESS_IDLE_TIMEOUT=1s"}})
	s.mustCLI("deploy", "../examples/hello-python", "--name", "hello", "--runtime", "python3.11", "--http=false")
	s.mustCLI("trigger", "create", "warm-runs", "--function", "hello", "--type", "cron", "--schedule", "@every 10s",
		"--prewarm-seconds", "5", "--payload", `{"name": "cron"}`)
	s.waitFor("two cron runs", func() bool { return len(s.invocations("triggers/warm-runs/invocations")) >= 2 })
	for _, r := range s.invocations("triggers/warm-runs/invocations") {
		if r.StatusCode != 200 || r.ColdStart {
			t.Errorf("cron run %s at %s: HTTP %d, cold start %v; want a warm run on the prewarmed instance", r.ID, r.StartedAt, r.StatusCode, r.ColdStart)
		}
	}
}
