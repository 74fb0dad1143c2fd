package e2e

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

func TestFunctionLifecycle(t *testing.T) {
	testFunctionLifecycle(t, startServer(t, serverOptions{}))
}

// The same test against PostgreSQL and an S3 server.
func TestFunctionLifecyclePostgresS3(t *testing.T) {
	testFunctionLifecycle(t, startServer(t, postgresS3Options(t)))
}

func testFunctionLifecycle(t *testing.T, s *server) {
	out := s.mustCLI("deploy", "../examples/hello-python", "--name", "hello", "--runtime", "python3.11", "--env", "GREETING=hi")
	if want := s.endpoint + "/fn/default/hello"; strings.TrimSpace(out) != want {
		t.Errorf("deploy printed %q, want the invoke URL %q", out, want)
	}
	code, fn := s.getFunction("default", "hello")
	if code != http.StatusOK || fn.Status.Phase != "Ready" || fn.Status.CodeSHA256 != fn.CodeSHA256 || fn.Env["GREETING"] != "hi" {
		t.Fatalf("after deploy: HTTP %d %+v; want Ready serving the uploaded code", code, fn)
	}
	s.mustCLI("deploy", "../examples/hello-node", "--name", "hello-node", "--runtime", "nodejs20")

	list := s.mustCLI("fn", "list")
	for _, want := range []string{"NAME", "hello ", "python3.11", "hello-node", "nodejs20", "Ready"} {
		if !strings.Contains(list, want) {
			t.Errorf("fn list output lacks %q:\n%s", want, list)
		}
	}
	var listed []function
	if err := json.Unmarshal([]byte(s.mustCLI("fn", "list", "-o", "json")), &listed); err != nil || len(listed) != 2 {
		t.Errorf("fn list -o json: %v, %d items; want 2", err, len(listed))
	}

	checkBadInputChangesNothing(t, s, fn)

	// Deploying the same directory again reuses the build.
	s.mustCLI("deploy", "../examples/hello-python", "--name", "hello", "--runtime", "python3.11", "--env", "GREETING=hi")

	s.restart()
	code, after := s.getFunction("default", "hello")
	if code != http.StatusOK || after.Status.Phase != "Ready" || after.CodeSHA256 != fn.CodeSHA256 {
		t.Fatalf("after a restart: HTTP %d %+v; want the same function Ready", code, after)
	}
	if detail := s.mustCLI("fn", "get", "hello"); !strings.Contains(detail, "Ready") || !strings.Contains(detail, "GREETING") {
		t.Errorf("fn get output:\n%s", detail)
	}

	s.mustCLI("fn", "delete", "hello")
	if code, _ := s.getFunction("default", "hello"); code != http.StatusNotFound {
		t.Errorf("get after delete: HTTP %d, want 404", code)
	}
	_, errOut, err := s.cli("fn", "get", "hello")
	if err == nil || !strings.Contains(errOut, `function "hello" not found`) {
		t.Errorf("fn get of a deleted function: err %v, stderr %q; want a failure saying it is not found", err, errOut)
	}
}

// checkBadInputChangesNothing sends a malicious zip, an unknown runtime,
// malformed JSON and a wrong token, and checks each answer and that the
// function is unchanged afterwards.
func checkBadInputChangesNothing(t *testing.T, s *server, before function) {
	t.Helper()
	path := "/v1/namespaces/default/functions/hello"

	code, body := s.api("POST", path+"/upload", "application/zip", zipOf(t, map[string]string{"handler.py": "x", "../evil.py": "boom"}))
	if code != http.StatusBadRequest || !strings.Contains(string(body), `../evil.py`) {
		t.Errorf("zip-slip upload: HTTP %d %s; want 400 naming ../evil.py", code, body)
	}
	code, body = s.api("POST", path+"/upload", "application/zip", []byte("not a zip at all"))
	if code != http.StatusBadRequest || !strings.Contains(string(body), "zip") {
		t.Errorf("non-zip upload: HTTP %d %s; want 400", code, body)
	}
	code, body = s.api("PUT", path, "application/json", []byte(`{"runtime": "cobol85"}`))
	if code != http.StatusBadRequest || !strings.Contains(string(body), "cobol85") || !strings.Contains(string(body), "nodejs20, python3.11") {
		t.Errorf("unknown runtime: HTTP %d %s; want 400 listing the known runtimes", code, body)
	}
	code, body = s.api("PUT", path, "application/json", []byte(`{"runtime": "python3.11",`))
	if code != http.StatusBadRequest || !strings.Contains(string(body), "invalid JSON") {
		t.Errorf("malformed JSON: HTTP %d %s; want 400", code, body)
	}
	code, body = s.api("PUT", path, "application/json", []byte(`{"runtime": "python3.11", "memroy_mb": 5}`))
	if code != http.StatusBadRequest || !strings.Contains(string(body), "memroy_mb") {
		t.Errorf("unknown field: HTTP %d %s; want 400 naming it", code, body)
	}
	code, body = s.api("POST", "/v1/namespaces/default/functions", "application/json", []byte(`{"name": "hello", "runtime": "python3.11"}`))
	if code != http.StatusConflict {
		t.Errorf("create of an existing function: HTTP %d %s; want 409", code, body)
	}
	code, body = s.apiWithToken("wrong-token-wrong-token", "DELETE", path, "", nil)
	if code != http.StatusUnauthorized || !strings.Contains(string(body), "invalid API token") {
		t.Errorf("wrong token: HTTP %d %s; want 401", code, body)
	}
	code, _ = s.apiWithToken("", "GET", path, "", nil)
	if code != http.StatusUnauthorized {
		t.Errorf("no token: HTTP %d; want 401", code)
	}
	if code, _ := s.api("GET", "/healthz", "", nil); code != http.StatusOK {
		t.Errorf("/healthz: HTTP %d", code)
	}

	_, after := s.getFunction("default", "hello")
	if after.CodeSHA256 != before.CodeSHA256 || after.Generation != before.Generation || after.Status.Phase != "Ready" || after.Runtime != "python3.11" {
		t.Errorf("bad input changed the function:\nbefore %+v\nafter  %+v", before, after)
	}
}

func TestBuildDependencies(t *testing.T) {
	s := startServer(t, serverOptions{})

	t.Run("python requirement that cannot be installed fails with the pip error", func(t *testing.T) {
		dir := writeTree(t, map[string]string{
			"handler.py":       "def handle(event, context):\n    return 1\n",
			"requirements.txt": "./wheels/missing_pkg-1.0-py3-none-any.whl\n",
		})
		_, errOut, err := s.cli("deploy", dir, "--name", "broken-deps", "--runtime", "python3.11")
		if err == nil {
			t.Fatal("deploy succeeded; want a failed build")
		}
		for _, want := range []string{"build log", "missing_pkg", "installing dependencies from requirements.txt failed"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("deploy stderr lacks %q:\n%s", want, errOut)
			}
		}
		_, fn := s.getFunction("default", "broken-deps")
		if fn.Status.Phase != "Failed" || fn.Status.BuildLog == "" {
			t.Errorf("status %+v; want Failed with the build log", fn.Status)
		}
	})

	t.Run("node file dependency is installed", func(t *testing.T) {
		dir := writeTree(t, map[string]string{
			"handler.js":                  "exports.handle = async () => require('greeter')();\n",
			"package.json":                `{"name": "fn", "version": "1.0.0", "dependencies": {"greeter": "file:./vendor/greeter"}}`,
			"vendor/greeter/package.json": `{"name": "greeter", "version": "1.0.0", "main": "index.js"}`,
			"vendor/greeter/index.js":     "module.exports = () => 'hi';\n",
		})
		s.mustCLI("deploy", dir, "--name", "with-deps", "--runtime", "nodejs20")
		_, fn := s.getFunction("default", "with-deps")
		if fn.Status.Phase != "Ready" {
			t.Errorf("status %+v; want Ready", fn.Status)
		}
	})

	t.Run("missing handler file names what the zip holds", func(t *testing.T) {
		dir := writeTree(t, map[string]string{"src/handler.py": "def handle(e, c): pass\n"})
		_, errOut, err := s.cli("deploy", dir, "--name", "no-handler", "--runtime", "python3.11")
		if err == nil || !strings.Contains(errOut, "handler.py") || !strings.Contains(errOut, "src/") {
			t.Errorf("deploy: err %v, stderr %q; want a failure naming handler.py and the top-level src/", err, errOut)
		}
	})
}

// zipOf builds a zip in memory whose entries are written exactly as named.
func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for name, content := range files {
		f, err := w.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte(content))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// writeTree writes files (slash-separated relative paths) into a new
// directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestBuildResumesAfterCrash kills the server in the middle of a build (npm
// running a slow install script) and checks that the next start builds the
// function to Ready instead of leaving it Building.
func TestBuildResumesAfterCrash(t *testing.T) {
	s := startServer(t, serverOptions{})
	// The first install hangs on a request to the test; the resumed one
	// gets an answer at once. (The sandbox lets an install reach the
	// network, not the test's files.)
	var requests atomic.Int32
	hold := make(chan struct{})
	index := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(index.Close)
	t.Cleanup(func() { close(hold) })
	marker := "first-install-" + strconv.Itoa(os.Getpid())
	dir := writeTree(t, map[string]string{
		"handler.js": "exports.handle = async () => 'ok';\n",
		"package.json": `{"name": "slow", "version": "1.0.0", "scripts": {"preinstall": "node -e \"require('http').get('` +
			index.URL + `/` + marker + `', r => process.exit(r.statusCode === 200 ? 0 : 1))\""}}`,
	})
	// Unsandboxed, the killed server cannot reap the script's node (npm
	// itself dies with the server); do it for the test.
	t.Cleanup(func() { exec.Command("pkill", "-f", marker).Run() })
	s.mustCLI("deploy", dir, "--name", "slow", "--runtime", "nodejs20", "--no-wait")
	s.waitFunction("default", "slow", "building", func(fn function) bool {
		return fn.Status.Phase == "Building" && requests.Load() > 0
	})
	s.crash()
	s.start()
	fn := s.waitFunction("default", "slow", "Ready", func(fn function) bool {
		return fn.Status.Phase == "Ready" || fn.Status.Phase == "Failed"
	})
	if fn.Status.Phase != "Ready" || fn.Status.ObservedGeneration != fn.Generation {
		t.Fatalf("after the crash: %+v; want Ready", fn.Status)
	}
	leftovers, _ := filepath.Glob(filepath.Join(s.opts.dataDir, "artifacts", ".tmp-*"))
	if len(leftovers) != 0 {
		t.Errorf("the interrupted build left %v", leftovers)
	}
}
