// Package acctest runs the provider's acceptance tests against real
// programs: a `sless server` built from this repository and started per
// test, and the Terraform CLI that hack/tools.sh builds.
//
// It repeats a few helpers of the main module's internal/testenv (the
// SLESS_REQUIRE_SERVICES rule, the repository root, a free port) because
// that package is internal to sless.kube5s.ru/sless and this module is
// terraform-provider-sless, the name `go build` and Terraform want for the
// provider's binary.
package acctest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sless.kube5s.ru/sless/client"

	// The server under test is built from the main module with "go build",
	// which go test's cache does not see: importing its CLI ties cached
	// results to the code the binary is built from.
	_ "sless.kube5s.ru/sless/cli"
)

// envRequireServices turns a missing Terraform CLI from a skip into a
// failure, as internal/testenv does for services.
const envRequireServices = "SLESS_REQUIRE_SERVICES"

// Required reports whether SLESS_REQUIRE_SERVICES is set to a true value;
// another non-empty value fails t.
func Required(t testing.TB) bool {
	t.Helper()
	v := os.Getenv(envRequireServices)
	if v == "" {
		return false
	}
	required, err := strconv.ParseBool(v)
	if err != nil {
		t.Fatalf("%s=%q: want 1 or 0", envRequireServices, v)
	}
	return required
}

// unavailable ends t because a tool it needs is missing: a failure when
// Required, a skip otherwise.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required(t) {
		t.Fatalf(format+" (a failure because %s is set)", append(args, envRequireServices)...)
	}
	t.Skipf(format+" (set %s=1 to make this a failure)", append(args, envRequireServices)...)
}

// RepoRoot returns the root of the sless repository: the nearest directory
// at or above the working directory whose go.mod is sless.kube5s.ru/sless.
func RepoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(data) == "sless.kube5s.ru/sless" {
			return dir
		}
		if dir == filepath.Dir(dir) {
			t.Fatalf("no go.mod of sless.kube5s.ru/sless at or above %s", wd)
		}
	}
}

func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], "\"`")
		}
	}
	return ""
}

// PreCheck skips t unless TF_ACC is set, the switch of terraform-plugin-
// testing, and makes TF_ACC_TERRAFORM_PATH name the Terraform CLI of
// hack/tools.sh terraform (built when SLESS_REQUIRE_SERVICES is set, else
// used only when already built), so that no terraform on PATH is ever used.
// It sets the process's environment for terraform-plugin-testing (the same
// values for every test, so parallel tests may call it) and returns the
// CLI's path.
func PreCheck(t testing.TB) string {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1 to run it (see terraform/README.md)")
	}
	tf := terraform(t)
	os.Setenv("TF_ACC_TERRAFORM_PATH", tf)
	os.Setenv("CHECKPOINT_DISABLE", "1")
	// Test configurations name the provider as users do, naeel/sless.
	os.Setenv("TF_ACC_PROVIDER_NAMESPACE", "naeel")
	// A CLI configuration of the machine (provider mirrors, credentials)
	// must not change what the tests do.
	os.Setenv("TF_CLI_CONFIG_FILE", os.DevNull)
	return tf
}

var terraformBinary struct {
	once sync.Once
	path string
	err  error
}

// terraform returns the path of the Terraform CLI, or ends t.
func terraform(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("TF_ACC_TERRAFORM_PATH"); p != "" {
		return p
	}
	build := Required(t)
	root := RepoRoot(t)
	b := &terraformBinary
	b.once.Do(func() {
		args := []string{"--cached", "terraform"}
		if build {
			args = args[1:]
			t.Logf("hack/tools.sh terraform: building Terraform unless cached (about 9 CPU-minutes on the first run)")
		}
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(filepath.Join(root, "hack", "tools.sh"), args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exitErr *exec.ExitError
		if !build && errors.As(err, &exitErr) && exitErr.ExitCode() == 3 {
			b.err = errors.New("the Terraform CLI is not built; run hack/tools.sh terraform")
			return
		}
		if err != nil {
			b.err = fmt.Errorf("hack/tools.sh %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
			return
		}
		b.path = strings.TrimSpace(stdout.String())
	})
	if b.err != nil {
		unavailable(t, "%v", b.err)
	}
	return b.path
}

// Main is the TestMain of the packages that start servers: it runs m and
// removes the sless binary they built.
func Main(m *testing.M) {
	code := m.Run()
	if slessBinary.dir != "" {
		os.RemoveAll(slessBinary.dir)
	}
	os.Exit(code)
}

var slessBinary struct {
	once      sync.Once
	dir, path string
	err       error
}

// sless returns the sless binary, built once per test binary.
func sless(t testing.TB) string {
	t.Helper()
	b := &slessBinary
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "sless-tf-bin-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "sless")
		out, err := exec.Command("go", "build", "-o", b.path, filepath.Join(RepoRoot(t), "cmd", "sless")).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("building sless: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Server is a running `sless server` with a data directory of its own.
type Server struct {
	Endpoint string
	// Token is the server's generated admin token.
	Token   string
	DataDir string
}

// Client returns an API client of the server with its admin token.
func (s *Server) Client() *client.Client {
	return &client.Client{Endpoint: s.Endpoint, Token: s.Token}
}

// syncBuffer is a bytes.Buffer safe for the writes of a process and the
// reads of a test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// StartServer starts `sless server` on a free loopback port for t, waits
// until it is ready and stops it when t ends (logging its output if t
// failed).
func StartServer(t testing.TB) *Server {
	t.Helper()
	bin := sless(t)
	s := &Server{DataDir: t.TempDir()}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s.Endpoint = "http://" + addr
	logs := &syncBuffer{}
	cmd := exec.Command(bin, "server", "--listen", addr, "--data-dir", s.DataDir)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLESS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			cmd.Process.Kill()
			t.Errorf("sless server did not stop within 40s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("sless server log:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(s.Endpoint + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-done:
			t.Fatalf("sless server exited: %v\n%s", cmd.ProcessState, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sless server not ready after 30s:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	token, err := os.ReadFile(filepath.Join(s.DataDir, "api-token"))
	if err != nil {
		t.Fatalf("reading the generated token: %v", err)
	}
	s.Token = strings.TrimSpace(string(token))
	return s
}
