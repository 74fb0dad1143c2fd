package app

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
)

// readyz returns /readyz's status and what it says it waits for.
func readyz(t *testing.T, listen string) (int, map[string]string) {
	t.Helper()
	resp, err := http.Get("http://" + listen + "/readyz")
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var body struct {
		WaitingFor map[string]string `json:"waiting_for"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.WaitingFor
}

// TestWaitForDependencies: start-up waits for a database that does not
// answer and a data directory that cannot be written, answering /healthz and
// a /readyz that names both, and goes on once they are there.
func TestWaitForDependencies(t *testing.T) {
	listen := "127.0.0.1:" + testenv.FreePort(t)
	dataDir := filepath.Join(t.TempDir(), "not-yet")
	// Nothing listens on this port: the database is down.
	dbPort := testenv.FreePort(t)
	c := testConfig(t, "--listen", listen, "--data-dir", dataDir,
		"--database-url", "postgres://sless@127.0.0.1:"+dbPort+"/sless?sslmode=disable&connect_timeout=1")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- waitForDependencies(ctx, c, discard) }()

	testenv.Eventually(t, time.Minute, "/readyz to name the database and the disk", func() bool {
		code, waiting := readyz(t, listen)
		return code == http.StatusServiceUnavailable && waiting["database"] != "" && waiting["disk"] != ""
	})
	_, waiting := readyz(t, listen)
	if strings.Contains(waiting["disk"], dataDir) {
		t.Errorf("/readyz names a server path: %q", waiting["disk"])
	}
	resp, err := http.Get("http://" + listen + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz while waiting: %v %v; want 200", resp, err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the disk to pass", func() bool {
		code, waiting := readyz(t, listen)
		return code == http.StatusServiceUnavailable && waiting["disk"] == "" && waiting["database"] != ""
	})
	cancel(errors.New("test over"))
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "waiting for database") {
			t.Errorf("after cancelling: %v; want an error naming the database", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("waitForDependencies did not return after its context ended")
	}
	// It no longer listens: the server's own listener takes the address.
	if code, _ := readyz(t, listen); code != 0 {
		t.Errorf("/readyz answered %d after the wait ended", code)
	}
}

// TestWaitForDependenciesReady returns at once when everything is there.
func TestWaitForDependenciesReady(t *testing.T) {
	c := testConfig(t)
	start := time.Now()
	if err := waitForDependencies(t.Context(), c, discard); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v with everything in place", d)
	}
}
