package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
)

// TestConsole runs the console's browser test (ui/e2e/console.test.mjs) in
// Debian's chromium, driven by playwright-core, against the real server with
// real python functions. SLESS_CONSOLE_SCREENSHOTS=DIR saves the main pages
// there as PNG files (hack/screenshots.sh sets it to docs/).
func TestConsole(t *testing.T) {
	b := testenv.NeedBrowser(t)
	s := startServer(t, serverOptions{})
	tenant := s.newToken("--namespace", "team-a", "--description", "console test")
	if code, body := s.apiWithToken(tenant, "POST", "/v1/namespaces/team-a/functions", "application/json",
		[]byte(`{"name": "team-a-fn", "runtime": "python3.11"}`)); code != 201 {
		t.Fatalf("creating team-a's function: %d %s", code, body)
	}
	dir := t.TempDir()
	hello := writeZip(t, dir, "hello.zip", "def handle(event, context):\n"+
		"    print(f\"hello from {event['name']}\")\n"+
		"    return {\"message\": f\"Hello, {event['name']}!\"}\n")
	broken := writeZip(t, dir, "broken.zip", "def handle(event, context):\n"+
		"    print('checking the stock')\n"+
		"    raise ValueError(f\"order {event['order']} is not in stock\")\n")

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Read here, the script is part of what go test's cache keys this
	// test's result on.
	script := filepath.Join(testenv.RepoRoot(t), "ui", "e2e", "console.test.mjs")
	if _, err := os.ReadFile(script); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, b.Node, script)
	cmd.Env = append(os.Environ(),
		"SLESS_URL="+s.endpoint, "SLESS_TOKEN="+s.token,
		"TENANT_TOKEN="+tenant, "TENANT_NS=team-a", "TENANT_FUNCTION=team-a-fn",
		"HELLO_ZIP="+hello, "FAIL_ZIP="+broken,
		"PLAYWRIGHT_CORE="+b.Playwright, "CHROMIUM="+b.Chromium, "USER_DATA_DIR="+filepath.Join(dir, "chromium-profile"),
		"SCREENSHOTS="+os.Getenv("SLESS_CONSOLE_SCREENSHOTS"))
	out := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	err := cmd.Run()
	t.Logf("browser test (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the console's browser test failed: %v", err)
	}
}

// writeZip writes a zip of handler.py with code and returns its path.
func writeZip(t *testing.T, dir, name, code string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create("handler.py")
	if err == nil {
		_, err = w.Write([]byte(code))
	}
	if err == nil {
		err = zw.Close()
	}
	path := filepath.Join(dir, name)
	if err == nil {
		err = os.WriteFile(path, buf.Bytes(), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}
