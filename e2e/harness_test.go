// Package e2e tests the real sless binary: it is built once, started as
// `sless server` on a free loopback port with a temporary data directory, and
// driven through its CLI and REST API with real python3 and node processes.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

// binary is the sless binary built by TestMain.
var binary string

func TestMain(m *testing.M) { testenv.RunWithBinary(m, "../cmd/sless", &binary) }

// serverOptions select the server's storage; empty fields take the defaults.
type serverOptions struct {
	dataDir     string
	databaseURL string
	blobURL     string
	env         []string
	// maxFileBlocks, when set, is the server's `ulimit -f`: a file it
	// writes cannot grow past that many blocks (512 or 1024 bytes, by shell).
	maxFileBlocks int
	// unprivileged runs the server as testenv.UnprivilegedUID, with the
	// system's PATH and a data directory of its own (the test must be
	// root); the test keeps root's view of everything.
	unprivileged bool
}

// server is a running `sless server`.
type server struct {
	t        *testing.T
	opts     serverOptions
	endpoint string
	token    string
	cmd      *exec.Cmd
	logs     *testenv.SyncBuffer // the log of the server running, or last run
	// earlierLogs are the logs of the servers before a restart, shown with
	// logs when the test fails.
	earlierLogs string
	done        chan struct{}
}

// startServer starts sless server and waits until it answers /readyz.
func startServer(t *testing.T, opts serverOptions) *server {
	t.Helper()
	if opts.unprivileged {
		if os.Geteuid() != 0 {
			t.Skip("starting a server as another user needs root")
		}
		opts.dataDir = filepath.Join(testenv.UnprivilegedDir(t), "data")
	}
	if opts.dataDir == "" {
		opts.dataDir = t.TempDir()
	}
	s := &server{t: t, opts: opts}
	s.start()
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("server log:\n%s%s", s.earlierLogs, s.logs.String())
		}
	})
	return s
}

func (s *server) start() {
	t := s.t
	t.Helper()
	port := testenv.FreePort(t)
	args := []string{"server", "--listen", "127.0.0.1:" + port, "--data-dir", s.opts.dataDir, "--log-level", "debug"}
	if s.opts.databaseURL != "" {
		args = append(args, "--database-url", s.opts.databaseURL)
	}
	if s.opts.blobURL != "" {
		args = append(args, "--blob-url", s.opts.blobURL)
	}
	if s.logs != nil {
		s.earlierLogs += s.logs.String() + "--- the server restarts ---\n"
	}
	s.logs = &testenv.SyncBuffer{}
	s.cmd = exec.Command(binary, args...)
	if s.opts.maxFileBlocks > 0 {
		s.cmd = exec.Command("/bin/sh", append([]string{"-c", fmt.Sprintf(`ulimit -f %d && exec "$0" "$@"`, s.opts.maxFileBlocks), binary}, args...)...)
	}
	s.cmd.Env = append(cleanEnv(), s.opts.env...)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if s.opts.unprivileged {
		// Only what an ordinary user of the machine has: the system's
		// python3.11 and node, a binary it may read.
		s.cmd.Path = testenv.UnprivilegedCopy(t, binary)
		s.cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + filepath.Dir(s.opts.dataDir), "LANG=C.UTF-8"}, s.opts.env...)
		s.cmd.SysProcAttr = testenv.AsUnprivileged()
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.done = make(chan struct{})
	go func() { s.cmd.Wait(); close(s.done) }()
	s.endpoint = "http://127.0.0.1:" + port
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.endpoint + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-s.done:
			t.Fatalf("sless server exited: %v\n%s", s.cmd.ProcessState, s.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sless server not ready after 30s:\n%s", s.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	token, err := os.ReadFile(filepath.Join(s.opts.dataDir, "api-token"))
	if err != nil {
		t.Fatalf("reading the generated token: %v", err)
	}
	s.token = strings.TrimSpace(string(token))
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		if !s.cmd.ProcessState.Success() {
			s.t.Errorf("sless server exited with %v after SIGTERM", s.cmd.ProcessState)
		}
	case <-time.After(40 * time.Second):
		s.cmd.Process.Kill()
		s.t.Errorf("sless server did not stop within 40s of SIGTERM")
	}
}

// restart stops the server and starts it again on the same data.
func (s *server) restart() {
	s.t.Helper()
	s.stop()
	s.start()
}

// cli runs the sless CLI against s the way a user on the same machine does:
// with only SLESS_DATA_DIR set, so that it discovers the endpoint and token.
func (s *server) cli(args ...string) (stdout, stderr string, err error) {
	return s.cliWithEnv(nil, args...)
}

// cliWithEnv runs the CLI like cli, with the variables env added.
func (s *server) cliWithEnv(env []string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(append(cleanEnv(), "SLESS_DATA_DIR="+s.opts.dataDir), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// mustCLI runs the CLI and fails the test when it fails.
func (s *server) mustCLI(args ...string) string {
	s.t.Helper()
	out, errOut, err := s.cli(args...)
	if err != nil {
		s.t.Fatalf("sless %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// api calls the REST API with the server's token and returns status and body.
func (s *server) api(method, path, contentType string, body []byte) (int, []byte) {
	return s.apiWithToken(s.token, method, path, contentType, body)
}

func (s *server) apiWithToken(token, method, path, contentType string, body []byte) (int, []byte) {
	s.t.Helper()
	authorization := ""
	if token != "" {
		authorization = "Bearer " + token
	}
	return s.request(method, path, contentType, authorization, body)
}

// request calls the server with an Authorization header as given (none when
// empty) and returns status and body.
func (s *server) request(method, path, contentType, authorization string, body []byte) (int, []byte) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.endpoint+path, bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp.StatusCode, data
}

// function is the part of the API's function JSON the tests look at.
type function struct {
	Name       string            `json:"name"`
	Runtime    string            `json:"runtime"`
	Env        map[string]string `json:"env"`
	CodeSHA256 string            `json:"code_sha256"`
	Egress     string            `json:"egress"`
	Generation int64             `json:"generation"`
	Status     struct {
		Phase              string `json:"phase"`
		Message            string `json:"message"`
		CodeSHA256         string `json:"code_sha256"`
		BuildLog           string `json:"build_log"`
		ObservedGeneration int64  `json:"observed_generation"`
	} `json:"status"`
}

func (s *server) getFunction(ns, name string) (int, function) {
	s.t.Helper()
	code, body := s.api("GET", "/v1/namespaces/"+ns+"/functions/"+name, "", nil)
	var fn function
	if code == http.StatusOK {
		if err := json.Unmarshal(body, &fn); err != nil {
			s.t.Fatalf("decoding %s: %v", body, err)
		}
	}
	return code, fn
}

// cleanEnv is the test's environment without SLESS_ variables, so that a
// developer's own settings do not leak into the servers under test.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLESS_") {
			env = append(env, kv)
		}
	}
	return env
}

// postgresS3Options returns server options that use PostgreSQL and S3, or ends the
// test when they are unavailable.
func postgresS3Options(t *testing.T) serverOptions {
	s3 := testenv.S3(t)
	return serverOptions{
		databaseURL: testenv.Postgres(t),
		blobURL:     s3.NewBucketURL(),
		env:         []string{"SLESS_S3_ACCESS_KEY=" + s3.AccessKey, "SLESS_S3_SECRET_KEY=" + s3.SecretKey},
	}
}

// crash kills the server with SIGKILL, as a power cut or the OOM killer would.
func (s *server) crash() {
	s.t.Helper()
	s.cmd.Process.Kill()
	<-s.done
}

// waitFunction polls a function until cond holds, failing after a minute.
func (s *server) waitFunction(ns, name string, what string, cond func(function) bool) function {
	s.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, fn := s.getFunction(ns, name)
		if code == http.StatusOK && cond(fn) {
			return fn
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("function %s/%s: not %s after a minute: HTTP %d %+v", ns, name, what, code, fn)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
