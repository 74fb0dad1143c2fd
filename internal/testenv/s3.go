package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// S3Server is an S3-compatible server (versitygw) running for one test, on
// loopback, over plain http, with SigV4 authentication.
type S3Server struct {
	// Endpoint is the server's host:port.
	Endpoint string
	// AccessKey and SecretKey are the root credentials, random per server.
	AccessKey string
	SecretKey string
	// Region is the region the server signs for.
	Region string
}

// NewBucketURL returns an s3:// URL (the format of blobs3.ParseURL) of a new
// bucket name no other test uses. The bucket is not created: blobs3.New does
// that. Credentials are not in the URL; they are AccessKey and SecretKey.
func (s S3Server) NewBucketURL() string {
	q := url.Values{
		"endpoint":   {s.Endpoint},
		"region":     {s.Region},
		"path_style": {"true"},
		"insecure":   {"true"},
	}
	return "s3://sless-test-" + randomHex(8) + "?" + q.Encode()
}

// S3 starts an S3 server for t and stops it when t ends. The server is
// versitygw built by hack/tools.sh: with SLESS_REQUIRE_SERVICES=1 it is
// built if missing (minutes, once per machine); otherwise a test runs only if
// it is already built, and is Unavailable if not.
//
// Each call starts its own server, in a fresh directory, because that costs
// well under a second (about 0.1 s) while a server shared by the test binary
// would need every package to stop it from TestMain; tests share one server
// by calling S3 once and making buckets with NewBucketURL. On Linux the
// server also dies with the test binary, so a panicking test leaves no
// server behind.
func S3(t testing.TB) S3Server {
	t.Helper()
	bin := versitygw(t)
	srv, err := startVersitygw(t, bin)
	if err != nil {
		Unavailable(t, "start versitygw: %v", err)
	}
	return srv
}

// versitygwBinary caches the binary's path for the test binary: looking it
// up runs hack/tools.sh, and building it takes minutes.
var versitygwBinary struct {
	once sync.Once
	path string
	err  error
}

// errNotBuilt means hack/tools.sh --cached found no binary of the tool.
var errNotBuilt = errors.New("it is not built; run hack/tools.sh with its name")

// versitygw returns the path of the versitygw binary, or ends t.
func versitygw(t testing.TB) string {
	t.Helper()
	build := Required(t)
	root := RepoRoot(t)
	b := &versitygwBinary
	b.once.Do(func() { b.path, b.err = findTool(t, root, build, "versitygw") })
	if b.err != nil {
		Unavailable(t, "S3 server: %v", b.err)
	}
	return b.path
}

// findTool asks hack/tools.sh for the binary of the tool name, building it
// if build is set.
func findTool(t testing.TB, root string, build bool, name string) (string, error) {
	args := []string{"--cached", name}
	if build {
		args = args[1:]
		t.Logf("hack/tools.sh %s: building %s unless cached (minutes on the first run)", name, name)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(root, "hack", "tools.sh"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if !build && errors.As(err, &exitErr) && exitErr.ExitCode() == 3 { // --cached: not built
		return "", fmt.Errorf("%s: %w", name, errNotBuilt)
	}
	if err != nil {
		return "", fmt.Errorf("hack/tools.sh %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// versitygwRegion is the region the test servers sign for (versitygw's
// default, passed explicitly so that S3Server.Region stays right).
const versitygwRegion = "us-east-1"

// Timeouts of the server's life cycle: it is ready in tens of milliseconds
// and stops in a few; the margins are for loaded CI machines.
const (
	readyTimeout = 15 * time.Second
	stopTimeout  = 5 * time.Second
)

// startVersitygw starts the server with a data directory and credentials of
// its own, waits until it answers and registers its stop with t.Cleanup.
// On error nothing is left running.
func startVersitygw(t testing.TB, bin string) (S3Server, error) {
	t.Helper()
	dir := t.TempDir() // before the stop cleanup, so removed after the stop
	port, err := freePort()
	if err != nil {
		return S3Server{}, err
	}
	srv := S3Server{
		Endpoint:  net.JoinHostPort("127.0.0.1", port),
		AccessKey: "test" + randomHex(8),
		SecretKey: randomHex(20),
		Region:    versitygwRegion,
	}
	cmd := exec.Command(bin, "--port", srv.Endpoint, "--region", srv.Region,
		"--health", "/health", "--quiet", "posix", dir)
	cmd.Env = append(serverEnv(), "ROOT_ACCESS_KEY="+srv.AccessKey, "ROOT_SECRET_KEY="+srv.SecretKey)
	out := &SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	p, err := startProcess(cmd)
	if err != nil {
		return S3Server{}, fmt.Errorf("run %s: %w", bin, err)
	}
	if err := waitReady(p, "http://"+srv.Endpoint+"/health"); err != nil {
		p.stop() // the startup error says more than the stop's
		return S3Server{}, fmt.Errorf("%w\nversitygw output:\n%s", err, out)
	}
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("stop versitygw: %v\n%s", err, out)
		}
		if t.Failed() {
			t.Logf("versitygw output:\n%s", out)
		}
	})
	t.Logf("versitygw on %s ready in %v", srv.Endpoint, time.Since(start).Round(time.Millisecond))
	return srv, nil
}

// serverEnv is the environment without versitygw's own settings (VGW_*,
// ROOT_*), which would change how the test server behaves.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VGW_") && !strings.HasPrefix(kv, "ROOT_") {
			env = append(env, kv)
		}
	}
	return env
}

// freePort returns a loopback TCP port that is free now. Another process may
// take it before the server binds it; the window is short enough in practice.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	return port, err
}

// FreePort returns a loopback TCP port that is free now, for a server a test
// starts; it ends t when there is none.
func FreePort(t testing.TB) string {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// process is a started server: exited is closed once it has exited, and err
// then holds what Wait returned.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// startProcess starts cmd and reaps it in the background. Start and Wait run
// on one locked OS thread: on Linux the child gets the parent-death signal
// when the thread that started it ends, and the locked thread lives exactly
// as long as the child.
func startProcess(cmd *exec.Cmd) (*process, error) {
	setParentDeathSignal(cmd)
	p := &process{cmd: cmd, exited: make(chan struct{})}
	started := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// stop sends SIGTERM and waits for the exit, killing the process if it
// takes longer than stopTimeout.
func (p *process) stop() error {
	return p.stopWithin(stopTimeout)
}

// stopWithin is stop with timeout for stopTimeout.
func (p *process) stopWithin(timeout time.Duration) error {
	select {
	case <-p.exited:
		return fmt.Errorf("exited before the test ended: %v", p.err)
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("send SIGTERM: %w", err)
	}
	select {
	case <-p.exited:
		return nil // the exit status after SIGTERM says nothing of interest
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("no exit %v after SIGTERM; killed", timeout)
	}
}

// waitReady polls the health URL until it answers 200, the process exits or
// readyTimeout passes.
func waitReady(p *process, healthURL string) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, err := client.Get(healthURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", healthURL, resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", readyTimeout, err)
		}
		select {
		case <-p.exited:
			return fmt.Errorf("exited during startup: %v", p.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// SyncBuffer is a bytes.Buffer safe for the concurrent writes of a child's
// stdout and stderr copiers and reads by the test.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
