package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"sless.kube5s.ru/sless/internal/discovery"
	"sless.kube5s.ru/sless/modules/server"
)

// kubernetesArgs are the settings the kubernetes mode needs besides
// --mode: what every replica shares.
var kubernetesArgs = []string{"--mode", "kubernetes", "--database-url", "postgres://sless@127.0.0.1:1/sless",
	"--blob-url", "s3://code?endpoint=127.0.0.1:1&insecure=true", "--s3-access-key", "k", "--s3-secret-key", "s",
	"--api-token", "token-token-token-1", "--image-repository", "127.0.0.1:5000/sless/functions"}

func testConfig(t *testing.T, args ...string) Config {
	t.Helper()
	var cfg Config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	AddFlags(fs, &cfg)
	if err := fs.Parse(append([]string{"--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, args...)); err != nil {
		t.Fatal(err)
	}
	if err := Resolve(fs, &cfg, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	return cfg
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestEmbeddedGraph validates the fx graph of the embedded mode without
// running any constructor.
func TestEmbeddedGraph(t *testing.T) {
	if err := fx.ValidateApp(Options(testConfig(t), "token-token-token-1", discard)); err != nil {
		t.Fatal(err)
	}
}

// TestEmbeddedRefusesImageBuilders: the local executor runs directories,
// so an image builder in the embedded mode is a configuration mistake that
// start-up names.
func TestEmbeddedRefusesImageBuilders(t *testing.T) {
	for _, b := range []string{"crane", "kaniko"} {
		app := fx.New(Options(testConfig(t, "--builder", b), "token-token-token-1", discard), fx.NopLogger)
		want := "builder " + b + " makes images, which the embedded mode's local executor cannot run"
		if err := app.Err(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("embedded mode with builder %s: %v; want %q", b, err, want)
		}
	}
}

// TestEmbeddedStartStop starts the whole embedded server, checks that it
// serves, and stops it.
func TestEmbeddedStartStop(t *testing.T) {
	cfg := testConfig(t)
	token, lock, err := Prepare(cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	var srv *server.Server
	app := fxtest.New(t, Options(cfg, token, discard), fx.Populate(&srv))
	app.RequireStart()
	defer app.RequireStop()

	base := "http://" + srv.Addr().String()
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200, "/v1/whoami": 401, "/nope": 404} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: got %d, want %d", path, resp.StatusCode, want)
		}
	}
	req, _ := http.NewRequest("GET", base+"/v1/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"namespace":"default"`) {
		t.Errorf("whoami: %d %s", resp.StatusCode, body)
	}
}

func TestGeneratedTokenIsStoredPrivately(t *testing.T) {
	cfg := testConfig(t)
	token, lock, err := Prepare(cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	lock.Unlock()
	again, lock, err := Prepare(cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	lock.Unlock()
	if again != token || len(token) < 32 {
		t.Fatalf("second start: token %q, %v; want the first token %q", again, err, token)
	}
	st, err := os.Stat(filepath.Join(cfg.DataDir, "api-token"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("token file: %v, %v; want mode 0600", st, err)
	}
	cfg.APIToken = "configured-token-0123"
	tok, lock, err := Prepare(cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	lock.Unlock()
	if tok != "configured-token-0123" {
		t.Errorf("configured token ignored: got %q", tok)
	}
}

// TestDataIsPrivate checks that the server creates its data for itself
// only: directories 0700, the token and the database 0600.
func TestDataIsPrivate(t *testing.T) {
	cfg := testConfig(t)
	cfg.DataDir = filepath.Join(cfg.DataDir, "new")
	cfg.DatabaseURL, cfg.BlobURL = "sqlite:"+filepath.Join(cfg.DataDir, "sless.db"), "file:"+filepath.Join(cfg.DataDir, "blobs")
	token, lock, err := Prepare(cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	app := fxtest.New(t, Options(cfg, token, discard))
	app.RequireStart()
	app.RequireStop()
	want := map[string]os.FileMode{
		"": 0o700, "tmp": 0o700, "artifacts": 0o700, "blobs": 0o700, "blobs/sha256": 0o700, "blobs/tmp": 0o700,
		"api-token": 0o600, "sless.db": 0o600,
	}
	for name, mode := range want {
		st, err := os.Stat(filepath.Join(cfg.DataDir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
		} else if st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v; want %v", name, st.Mode().Perm(), mode)
		}
	}
}

func TestStartFailsOnBadAddress(t *testing.T) {
	cfg := testConfig(t, "--listen", "203.0.113.1:1")
	app := fx.New(Options(cfg, "token-token-token-1", discard), fx.NopLogger)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := app.Start(ctx)
	if err == nil {
		app.Stop(ctx)
		t.Fatal("start succeeded on an address this machine does not have")
	}
	if !strings.Contains(err.Error(), "listening on 203.0.113.1:1") {
		t.Errorf("got %v; want it to name the address", err)
	}
}

// At debug level fx's events are one line each, without stack traces.
func TestDebugLogOfFxHasNoTraces(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(testConfig(t, "--log-level", "debug"), &buf)
	cfg := testConfig(t)
	token, lock, err := Prepare(cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	app := fxtest.New(t, Options(cfg, token, log))
	app.RequireStart().RequireStop()
	out := buf.String()
	if !strings.Contains(out, "msg=provided") {
		t.Fatalf("no fx event in the debug log:\n%s", out)
	}
	for _, trace := range []string{"stacktrace", "moduletrace"} {
		if strings.Contains(out, trace) {
			t.Errorf("the debug log has fx's %s:\n%.2000s", trace, out)
		}
	}
}

// A second Prepare on a data directory in use fails naming the holder; the
// next one after it was released empties the tmp directory that a killed
// server's uploads left.
func TestPrepareLocksTheDataDirectory(t *testing.T) {
	cfg := testConfig(t)
	_, lock, err := Prepare(cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Prepare(cfg, discard); !errors.Is(err, discovery.ErrInUse) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("second Prepare: got %v, want ErrInUse naming pid %d", err, os.Getpid())
	}
	left := filepath.Join(cfg.DataDir, "tmp", "upload-1.zip")
	if err := os.WriteFile(left, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	lock.Unlock()
	_, lock, err = Prepare(cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	lock.Unlock()
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed server's %s: %v, want it removed", left, err)
	}
}
