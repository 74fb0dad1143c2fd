package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
)

// A second server on a data directory in use must not start: it would share
// the database, the blobs and the triggers with the first, and take the
// discovery file with it when it stops.
func TestSecondServerOnADataDirIsRefused(t *testing.T) {
	s := startServer(t, serverOptions{})
	port := testenv.FreePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	second := exec.CommandContext(ctx, binary, "server", "--listen", "127.0.0.1:"+port, "--data-dir", s.opts.dataDir)
	second.Env = cleanEnv()
	logs := &testenv.SyncBuffer{}
	second.Stdout, second.Stderr = logs, logs
	second.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- second.Wait() }()
	var err error
wait:
	for {
		select {
		case err = <-exited:
			break wait
		case <-time.After(50 * time.Millisecond):
		}
		if resp, err := http.Get("http://127.0.0.1:" + port + "/readyz"); err == nil {
			resp.Body.Close()
			second.Process.Signal(syscall.SIGTERM)
			<-exited
			t.Fatalf("a second server started on the data directory of a running one:\n%s", logs.String())
		}
	}
	holder := fmt.Sprintf("pid %d, serving %s", s.cmd.Process.Pid, s.endpoint)
	if err == nil || !strings.Contains(logs.String(), holder) {
		t.Errorf("second server: exit %v, output:\n%s\nwant a failure naming the running server (%s)", err, logs.String(), holder)
	}
	// The first server keeps its discovery file.
	if out := s.mustCLI("fn", "list"); !strings.Contains(out, "NAME") {
		t.Errorf("fn list after the refused start: %q", out)
	}
}

// cgroupOfLog finds the memory cgroup of a server's instances in its log.
var cgroupOfLog = regexp.MustCompile(`mechanism="cgroup v[12] ([^",]+)`)

// After a kill -9, the CLI says the recorded server is not running, and the
// next start removes what the dead one left: its discovery file, its
// instance directory and its memory cgroups.
func TestKilledServerIsCleanedUpAfter(t *testing.T) {
	tmp := t.TempDir()
	s := startServer(t, serverOptions{env: []string{"TMPDIR=" + tmp}})
	s.mustCLI("deploy", "../examples/hello-python", "--name", "hello", "--runtime", "python3.11")
	if code, _, body := s.post("/fn/default/hello", `{"name": "x"}`); code != http.StatusOK {
		t.Fatalf("invoke: HTTP %d %s", code, body)
	}
	pid := s.cmd.Process.Pid
	s.crash()

	left, err := os.ReadDir(tmp)
	if err != nil || len(left) == 0 {
		t.Fatalf("the killed server left nothing in its temp directory (%v): is TMPDIR ignored?", err)
	}
	if _, err := os.Stat(filepath.Join(s.opts.dataDir, "server.json")); err != nil {
		t.Fatalf("the killed server left no server.json: %v", err)
	}
	var cgroup string
	if m := cgroupOfLog.FindStringSubmatch(s.logs.String()); m != nil {
		cgroup = m[1]
		if _, err := os.Stat(cgroup); err != nil {
			t.Fatalf("the killed server's cgroup %s: %v", cgroup, err)
		}
	}
	_, errOut, err := s.cli("fn", "list")
	if err == nil || !strings.Contains(errOut, "not running") || !strings.Contains(errOut, fmt.Sprintf("pid %d", pid)) {
		t.Errorf("CLI with the server killed: err %v, stderr %q; want it to say the server (pid %d) is not running", err, errOut, pid)
	}

	s.start()
	for _, e := range left {
		if _, err := os.Stat(filepath.Join(tmp, e.Name())); err == nil {
			t.Errorf("the killed server's %s is still in the temp directory after the next start", e.Name())
		}
	}
	if _, err := os.Stat(cgroup); cgroup != "" && err == nil {
		t.Errorf("the killed server's cgroup %s is still there after the next start", cgroup)
	}
	if !strings.Contains(s.logs.String(), "did not stop cleanly") {
		t.Errorf("the next start did not log that it cleaned up after pid %d:\n%s", pid, s.logs.String())
	}
	s.mustCLI("fn", "list")
}

// A user's mistake is not a server error, and neither is a clean shutdown:
// a 409 on create and a SIGTERM while an interpreter is being pre-started
// log no error.
func TestUserErrorsAndShutdownLogNoError(t *testing.T) {
	s := startServer(t, serverOptions{})
	s.mustCLI("deploy", "../examples/hello-python", "--name", "hello", "--runtime", "python3.11")
	if code, body := s.api("POST", "/v1/namespaces/default/functions", "application/json",
		[]byte(`{"name": "hello", "runtime": "python3.11"}`)); code != http.StatusConflict {
		t.Fatalf("creating an existing function: HTTP %d %s, want 409", code, body)
	}
	// The cold start takes the pre-started interpreter and starts its
	// replacement, which the SIGTERM right after cancels.
	if code, _, body := s.post("/fn/default/hello", `{"name": "x"}`); code != http.StatusOK {
		t.Fatalf("invoke: HTTP %d %s", code, body)
	}
	s.stop()
	for line := range strings.SplitSeq(s.logs.String(), "\n") {
		if strings.Contains(line, "level=ERROR") {
			t.Errorf("logged an error: %s", line)
		}
	}
}
