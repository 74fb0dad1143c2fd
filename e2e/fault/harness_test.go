// Package fault breaks the real sless binary under load (kill -9, a database
// that stops, a full disk, SIGTERM while the database is down, a power cut)
// and checks that every invocation a client was answered is in the ledger
// afterwards, and that the ledger holds no invocation that was not answered.
//
// The power cut runs the server on internal/testenv/powercut, a FUSE disk
// that loses what was not fsynced; it needs /dev/fuse and root.
//
// The tests that stop PostgreSQL run a private cluster (initdb and pg_ctl in
// a temporary directory, on its own port), never the shared one; the full
// disk is a small tmpfs. Without root or PostgreSQL's binaries they skip,
// unless SLESS_REQUIRE_SERVICES=1.
package fault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/storage/sqldb"

	// See e2e/harness_test.go: ties the cached result to the server's code.
	_ "sless.kube5s.ru/sless/cli"
)

var binary string

func TestMain(m *testing.M) { testenv.RunWithBinary(m, "../../cmd/sless", &binary) }

// server is a `sless server` on a data directory and database.
type server struct {
	t           *testing.T
	dataDir     string
	databaseURL string
	// args are more flags of `sless server`.
	args     []string
	endpoint string
	cmd      *exec.Cmd
	logs     *testenv.SyncBuffer
	done     chan struct{}
}

// newServer returns a server that is not started yet; it keeps its port
// across restarts, so that a load generator follows it.
func newServer(t *testing.T, dataDir, databaseURL string) *server {
	s := &server{t: t, dataDir: dataDir, databaseURL: databaseURL, endpoint: "http://127.0.0.1:" + testenv.FreePort(t)}
	t.Cleanup(func() {
		if s.running() {
			s.cmd.Process.Kill()
			<-s.done
		}
		if t.Failed() {
			t.Logf("server log:\n%s", s.logs.String())
		}
	})
	return s
}

// start starts the server and waits for /readyz.
func (s *server) start() {
	s.t.Helper()
	s.launch()
	testenv.Eventually(s.t, 2*time.Minute, "the server to be ready", func() bool {
		if !s.running() {
			s.t.Fatalf("sless server exited: %v", s.cmd.ProcessState)
		}
		code, _ := get(s.endpoint + "/readyz")
		return code == http.StatusOK
	})
}

// launch starts the server without waiting for it.
func (s *server) launch() {
	t := s.t
	t.Helper()
	args := []string{"server", "--listen", strings.TrimPrefix(s.endpoint, "http://"), "--data-dir", s.dataDir, "--prestart", "0"}
	if s.databaseURL != "" {
		args = append(args, "--database-url", s.databaseURL)
	}
	args = append(args, s.args...)
	if s.logs == nil {
		s.logs = &testenv.SyncBuffer{}
	}
	fmt.Fprintf(s.logs, "--- start %v\n", time.Now().Format(time.TimeOnly))
	s.cmd = exec.Command(binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLESS_") {
			s.cmd.Env = append(s.cmd.Env, kv)
		}
	}
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	s.done = done
	go func() { s.cmd.Wait(); close(done) }()
}

func (s *server) running() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// kill kills the server with SIGKILL.
func (s *server) kill() {
	s.cmd.Process.Kill()
	<-s.done
}

// stop sends SIGTERM and returns how long the server took to exit, failing
// t when it exits with an error or takes longer than limit.
func (s *server) stop(limit time.Duration) time.Duration {
	s.t.Helper()
	start := time.Now()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(limit):
		s.cmd.Process.Kill()
		<-s.done
		s.t.Fatalf("the server did not exit within %v of SIGTERM", limit)
	}
	if !s.cmd.ProcessState.Success() {
		s.t.Errorf("the server exited with %v after SIGTERM", s.cmd.ProcessState)
	}
	return time.Since(start)
}

// deploy deploys examples/hello-python as hello with an http trigger.
func (s *server) deploy() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "deploy", "../../examples/hello-python", "--name", "hello",
		"--runtime", "python3.11", "--concurrency", "8", "--timeout", "30")
	cmd.Env = append(os.Environ(), "SLESS_DATA_DIR="+s.dataDir, "SLESS_ENDPOINT="+s.endpoint)
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("sless deploy: %v\n%s", err, out)
	}
}

func get(url string) (int, string) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// load calls /fn/default/hello from several connections until stopped, and
// keeps the invocation id of every answer.
type load struct {
	mu sync.Mutex
	// answered are the invocation ids of the answers, answeredAt when
	// each arrived, ok counts the 2xx
	// ones; byStatus counts answers by status; cut counts requests that
	// failed after they may have reached the server (a reset or a timeout,
	// not a refused connection).
	answered   []string
	answeredAt []time.Time
	ok         int
	byStatus   map[int]int
	cut        int
	bodies503  []string
	// slowest is the longest answered request since the last reset.
	slowest time.Duration

	endpoint string
	stopCh   chan struct{}
	wg       sync.WaitGroup
}

func startLoad(endpoint string, conns int) *load {
	l := &load{endpoint: endpoint, byStatus: map[int]int{}, stopCh: make(chan struct{})}
	for range conns {
		l.wg.Go(l.run)
	}
	return l
}

func (l *load) run() {
	client := &http.Client{Timeout: 20 * time.Second}
	for {
		select {
		case <-l.stopCh:
			return
		default:
		}
		start := time.Now()
		resp, err := client.Post(l.endpoint+"/fn/default/hello", "application/json", bytes.NewReader([]byte(`{"name": "fault"}`)))
		if err != nil {
			if !errors.Is(err, syscall.ECONNREFUSED) {
				l.mu.Lock()
				l.cut++
				l.mu.Unlock()
			}
			time.Sleep(10 * time.Millisecond) // the server is down
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		l.mu.Lock()
		switch {
		case err != nil:
			l.cut++
		case resp.StatusCode == http.StatusOK:
			l.ok++
			l.slowest = max(l.slowest, took)
		case resp.StatusCode == http.StatusServiceUnavailable && len(l.bodies503) < 3:
			l.bodies503 = append(l.bodies503, string(body))
		}
		// Every answer with an invocation id must be recorded (a 503 for a
		// function not ready yet after a restart is), whatever its status.
		if id := resp.Header.Get("X-Sless-Invocation-Id"); err == nil && id != "" {
			l.answered = append(l.answered, id)
			l.answeredAt = append(l.answeredAt, time.Now())
		}
		if err == nil {
			l.byStatus[resp.StatusCode]++
		}
		l.mu.Unlock()
		if err == nil && resp.StatusCode != http.StatusOK {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// count returns how many 2xx answers there were so far.
func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok
}

// resetSlowest starts measuring the slowest answer anew and returns the
// slowest so far.
func (l *load) resetSlowest() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.slowest
	l.slowest = 0
	return d
}

// status returns how many answers had code so far.
func (l *load) status(code int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byStatus[code]
}

func (l *load) stop() {
	close(l.stopCh)
	l.wg.Wait()
}

// waitAnswers waits until n more answers arrived.
func (l *load) waitAnswers(t *testing.T, n int) {
	t.Helper()
	want := l.count() + n
	testenv.Eventually(t, 2*time.Minute, fmt.Sprintf("%d answers", want), func() bool { return l.count() >= want })
}

// recordedIDs returns the ids of the function's recorded invocations,
// reading the database directly (the server is stopped), without the
// summary records of refusals (they have no method).
func recordedIDs(t *testing.T, databaseURL string) []string {
	t.Helper()
	db, _, err := sqldb.Open(databaseURL, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close(db)
	var ids []string
	if err := db.Raw("SELECT id FROM invocations WHERE namespace = 'default' AND function = 'hello' AND method <> ''").Scan(&ids).Error; err != nil {
		t.Fatal(err)
	}
	return ids
}

// check compares the answered ids with the recorded ones: every answer must
// be recorded, and at most maxUnanswered records may lack an answer (the
// requests a kill cut off after their record was written).
func check(t *testing.T, l *load, recorded []string, maxUnanswered int) {
	t.Helper()
	rec := map[string]bool{}
	for _, id := range recorded {
		if rec[id] {
			t.Errorf("invocation %s is recorded twice", id)
		}
		rec[id] = true
	}
	var missing []string
	ans := map[string]bool{}
	for _, id := range l.answered {
		ans[id] = true
		if !rec[id] {
			missing = append(missing, id)
		}
	}
	var unanswered []string
	for _, id := range recorded {
		if !ans[id] {
			unanswered = append(unanswered, id)
		}
	}
	slices.Sort(missing)
	t.Logf("%d answered, %d recorded, %d answered but missing, %d recorded without an answer (%d requests cut off), statuses %v, slowest answer %v",
		len(l.answered), len(recorded), len(missing), len(unanswered), l.cut, l.byStatus, l.slowest.Round(time.Millisecond))
	if len(missing) > 0 {
		t.Errorf("%d answered invocations are not recorded, e.g. %s", len(missing), missing[0])
	}
	if len(unanswered) > maxUnanswered {
		t.Errorf("%d recorded invocations were never answered (at most %d requests were cut off), e.g. %s", len(unanswered), maxUnanswered, unanswered[0])
	}
}

// requireRoot skips (or fails, when services are required) without root.
func requireRoot(t *testing.T, why string) {
	t.Helper()
	if os.Getuid() != 0 {
		testenv.Unavailable(t, "%s needs root", why)
	}
}
