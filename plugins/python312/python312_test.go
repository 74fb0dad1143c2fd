package python312_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"

	// The binary under test is built from this package with "go build",
	// which go test's cache does not see: importing it ties the cached
	// result to the code the binary is built from, so that a change to the
	// server reruns these tests.
	_ "sless.kube5s.ru/sless/cli"
)

// TestAddingThePluginToMainIsAllItTakes makes the operator's change to
// cmd/sless/main.go (one import, one list entry), builds that binary with the
// edit applied as an overlay, and checks that its server knows python3.12
// while the unchanged binary does not.
func TestAddingThePluginToMainIsAllItTakes(t *testing.T) {
	root := testenv.RepoRoot(t)
	mainPath := filepath.Join(root, "cmd", "sless", "main.go")
	src, err := os.ReadFile(mainPath)
	if err != nil {
		t.Fatal(err)
	}
	edited, ok := addPlugin(string(src))
	if !ok {
		t.Fatalf("cmd/sless/main.go no longer has the `var plugins = []fx.Option{` list and an import block that docs/plugins.md tells operators to edit:\n%s", src)
	}

	dir := t.TempDir()
	editedPath := filepath.Join(dir, "main.go")
	os.WriteFile(editedPath, []byte(edited), 0o644)
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{mainPath: editedPath}})
	overlayPath := filepath.Join(dir, "overlay.json")
	os.WriteFile(overlayPath, overlay, 0o644)

	withPlugin := build(t, root, filepath.Join(dir, "sless-plugin"), "-overlay", overlayPath)
	without := build(t, root, filepath.Join(dir, "sless"))

	if names := runtimes(t, withPlugin); strings.Join(names, ",") != "nodejs20,python3.11,python3.12" {
		t.Errorf("runtimes with the plugin: got %v, want nodejs20, python3.11, python3.12", names)
	}
	if names := runtimes(t, without); strings.Join(names, ",") != "nodejs20,python3.11" {
		t.Errorf("runtimes without the plugin: got %v, want nodejs20, python3.11", names)
	}
}

// addPlugin applies the edit docs/plugins.md describes.
func addPlugin(src string) (string, bool) {
	const list = "var plugins = []fx.Option{\n"
	const imp = "import (\n"
	if !strings.Contains(src, list) || !strings.Contains(src, imp) {
		return "", false
	}
	src = strings.Replace(src, imp, imp+"\t\"sless.kube5s.ru/sless/plugins/python312\"\n", 1)
	return strings.Replace(src, list, list+"\tpython312.Module,\n", 1), true
}

func build(t *testing.T, root, out string, flags ...string) string {
	t.Helper()
	args := append(append([]string{"build", "-o", out}, flags...), "./cmd/sless")
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return out
}

// runtimes starts the binary's server and returns GET /v1/runtimes.
func runtimes(t *testing.T, bin string) []string {
	t.Helper()
	addr := "127.0.0.1:" + testenv.FreePort(t)
	const token = "plugin-test-token-0123"
	cmd := exec.Command(bin, "server", "--listen", addr, "--data-dir", t.TempDir(), "--api-token", token)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Written by exec's copying goroutine while the test may read it.
	logs := &testenv.SyncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/runtimes", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var out struct {
				Items []struct {
					Name string `json:"name"`
				} `json:"items"`
			}
			if err := json.Unmarshal(body, &out); err != nil {
				t.Fatalf("GET /v1/runtimes: %v: %s", err, body)
			}
			var names []string
			for _, it := range out.Items {
				names = append(names, it.Name)
			}
			return names
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not answer: %v\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
