package plugins_test

import (
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

	// The binary under test is built with "go build", which go test's cache
	// does not see: importing the server ties the cached result to its code.
	_ "sless.kube5s.ru/sless/cli"
)

// pluginMain is an operator's own sless binary, in a module of its own: a
// plugin that adds an authenticated route and a readiness check through the
// public extension points that docs/plugins.md names.
const pluginMain = `package main

import (
	"context"
	"errors"
	"os"

	"github.com/gin-gonic/gin"
	"go.uber.org/fx"

	"sless.kube5s.ru/sless/cli"
	"sless.kube5s.ru/sless/modules/auth"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
	"sless.kube5s.ru/sless/modules/server"
	"sless.kube5s.ru/sless/modules/server/httpx"
)

type acme struct{}

func (acme) Register(v1 *gin.RouterGroup, _ *gin.Engine) {
	v1.GET("/acme/whoami", func(c *gin.Context) {
		p, _ := auth.FromContext(c.Request.Context())
		c.JSON(200, gin.H{"acme": true, "admin": p.AllNamespaces})
	})
}

var acmeModule = fx.Module("acme",
	fx.Provide(httpx.AsRoutes(func() acme { return acme{} })),
	fx.Provide(fx.Annotate(func() server.ReadyCheck {
		return server.ReadyCheck{Name: "acme", Check: func(context.Context) error { return errors.New("the acme backend is down") }}
	}, fx.ResultTags(server.ReadyChecksGroup))),
)

func main() {
	sandbox.Init()
	os.Exit(cli.Main(os.Args[1:], acmeModule))
}
`

// TestPluginFromItsOwnModule builds a sless binary from an operator's module
// that requires sless (through a replace directive to this checkout) and
// adds a plugin: it must compile against the public packages alone, and its
// server must serve the plugin's route behind the API's authentication and
// report the plugin's readiness check.
func TestPluginFromItsOwnModule(t *testing.T) {
	root := testenv.RepoRoot(t)
	dir := t.TempDir()
	goMod := "module example.com/acme-sless\n\ngo 1.26\n\nrequire sless.kube5s.ru/sless v0.0.0\n\nreplace sless.kube5s.ru/sless => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"go.mod": goMod, "go.sum": string(sum), "main.go": pluginMain} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// The operator's module names the versions of gin and fx it imports:
	// those of sless's own go.mod, which tidy takes from the requirement
	// graph.
	run("mod", "tidy")
	bin := filepath.Join(dir, "acme-sless")
	run("build", "-o", bin, ".")

	addr := "127.0.0.1:" + testenv.FreePort(t)
	const token = "plugin-test-token-0123"
	cmd := exec.Command(bin, "server", "--listen", addr, "--data-dir", t.TempDir(), "--api-token", token)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logs := &testenv.SyncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	get := func(path, auth string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get("/v1/acme/whoami", token)
		if code == 200 {
			if !strings.Contains(body, `"acme":true`) || !strings.Contains(body, `"admin":true`) {
				t.Errorf("the plugin's route answered %s; want acme and the admin principal", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plugin's route: %d %s\n%s", code, body, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := get("/v1/acme/whoami", ""); code != 401 {
		t.Errorf("the plugin's route without a token: %d %s; want 401", code, body)
	}
	if code, body := get("/readyz", ""); code != 503 || !strings.Contains(body, `"acme":"the acme backend is down"`) {
		t.Errorf("/readyz: %d %s; want 503 naming the plugin's check", code, body)
	}
}
