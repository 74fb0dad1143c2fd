package fault

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sless.kube5s.ru/sless/app"
	"sless.kube5s.ru/sless/internal/testenv"
)

// conns is how many connections the load generator keeps busy.
const conns = 8

func TestKill9SQLite(t *testing.T) {
	dir := t.TempDir()
	kill9(t, dir, "", "sqlite:"+filepath.Join(dir, "sless.db"))
}

func TestKill9Postgres(t *testing.T) {
	url := testenv.Postgres(t)
	kill9(t, t.TempDir(), url, url)
}

// kill9 kills the server with SIGKILL under load, twice, restarting it each
// time.
func kill9(t *testing.T, dir, serverURL, readURL string) {
	s := newServer(t, dir, serverURL)
	s.start()
	s.deploy()
	l := startLoad(s.endpoint, conns)
	for range 2 {
		l.waitAnswers(t, 300)
		s.kill()
		s.start()
	}
	l.waitAnswers(t, 100)
	l.stop()
	s.stop(time.Minute)
	check(t, l, recordedIDs(t, readURL), l.cut)
}

// TestPostgresRestartUnderLoad stops PostgreSQL while /fn is under load
// for longer than the old in-memory queue lasted (10,000 records), then
// starts it again: /fn answers throughout, without waiting on the database.
func TestPostgresRestartUnderLoad(t *testing.T) {
	c := newCluster(t)
	s := newServer(t, t.TempDir(), c.URL())
	s.start()
	s.deploy()
	l := startLoad(s.endpoint, conns)
	l.waitAnswers(t, 300)
	c.stop()
	c.waitDown(t)
	l.resetSlowest()
	l.waitAnswers(t, 12000)
	slowest := l.resetSlowest()
	testenv.Eventually(t, time.Minute, "/readyz to report the database", func() bool {
		code, body := get(s.endpoint + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "database")
	})
	c.start()
	testenv.Eventually(t, 2*time.Minute, "/readyz to pass again", func() bool {
		code, _ := get(s.endpoint + "/readyz")
		return code == http.StatusOK
	})
	l.waitAnswers(t, 100)
	l.stop()
	s.stop(time.Minute)
	check(t, l, recordedIDs(t, c.URL()), 0)
	// Before the journal, /fn held every answer once 10,000 records
	// waited, for as long as the database was down.
	if slowest > 5*time.Second {
		t.Errorf("the slowest answer while PostgreSQL was down took %v; /fn waited on the database", slowest)
	}
}

// TestSigtermWithDatabaseDown stops the server while PostgreSQL is down:
// it exits within its stop timeout, says that the records wait in the
// journal, and the next start writes them. That start, with PostgreSQL
// still down, waits for it instead of exiting.
func TestSigtermWithDatabaseDown(t *testing.T) {
	c := newCluster(t)
	s := newServer(t, t.TempDir(), c.URL())
	s.start()
	s.deploy()
	l := startLoad(s.endpoint, conns)
	l.waitAnswers(t, 300)
	c.stop()
	c.waitDown(t)
	l.waitAnswers(t, 500)
	took := s.stop(app.StopTimeout + 10*time.Second)
	l.stop()
	if !strings.Contains(s.logs.String(), "kept in the journal and written at the next start") {
		t.Error("the log does not say that the records wait in the journal")
	}
	t.Logf("stopped in %v", took.Round(time.Millisecond))

	s.launch()
	testenv.Eventually(t, time.Minute, "/readyz to say the start waits for the database", func() bool {
		code, body := get(s.endpoint + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, `"waiting_for":{"database"`)
	})
	if code, _ := get(s.endpoint + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while waiting for the database: %d, want 200", code)
	}
	if !s.running() {
		t.Fatal("the server exited while the database was down")
	}
	c.start()
	testenv.Eventually(t, 2*time.Minute, "the server to be ready once the database is up", func() bool {
		code, _ := get(s.endpoint + "/readyz")
		return code == http.StatusOK
	})
	s.stop(time.Minute)
	check(t, l, recordedIDs(t, c.URL()), 0)
}

// TestDiskFull fills the disk of the data directory (database and journal)
// under load: /fn refuses with a 503 that says why, /readyz fails, and both
// recover by themselves once there is space again.
func TestDiskFull(t *testing.T) {
	requireRoot(t, "mounting a tmpfs")
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64m,mode=0700"); err != nil {
		testenv.Unavailable(t, "mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	s := newServer(t, dir, "")
	s.start()
	s.deploy()
	l := startLoad(s.endpoint, conns)
	l.waitAnswers(t, 300)

	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	testenv.Eventually(t, time.Minute, "/fn to refuse with 503", func() bool { return l.status(http.StatusServiceUnavailable) > 0 })
	l.mu.Lock()
	body := l.bodies503[0]
	l.mu.Unlock()
	if !strings.Contains(body, "the disk is full") {
		t.Errorf("503 body %s; want it to say the disk is full", body)
	}
	if code, body := get(s.endpoint + "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "ledger") {
		t.Errorf("/readyz with a full disk: %d %s; want 503 naming the ledger", code, body)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	l.waitAnswers(t, 300)
	l.stop()
	s.stop(time.Minute)
	check(t, l, recordedIDs(t, "sqlite:"+filepath.Join(dir, "sless.db")), 0)
}

// fill writes path until the disk is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for size := len(chunk); size >= 512; size /= 2 {
		for {
			_, err := f.Write(chunk[:size])
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatalf("filling the disk: %v", err)
			}
		}
	}
}

// TestAllInstancesKilled kills every process the server started (its
// instances): the next call is a cold start that succeeds, not a 502 from an
// instance the server had not noticed was gone.
func TestAllInstancesKilled(t *testing.T) {
	s := newServer(t, t.TempDir(), "")
	s.start()
	s.deploy()
	for round := range 3 {
		if code, body := post(s.endpoint + "/fn/default/hello"); code != http.StatusOK {
			t.Fatalf("round %d, before the kill: %d %s", round, code, body)
		}
		children := descendants(t, s.cmd.Process.Pid)
		if len(children) == 0 {
			t.Fatal("the server runs no instance process")
		}
		for _, pid := range children {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		testenv.Eventually(t, time.Minute, "the instances to be gone", func() bool {
			for _, pid := range children {
				if syscall.Kill(pid, 0) == nil && !zombie(pid) {
					return false
				}
			}
			return true
		})
		if code, body := post(s.endpoint + "/fn/default/hello"); code != http.StatusOK {
			t.Errorf("round %d, the first call after every instance was killed: %d %s; want 200 after a cold start", round, code, body)
		}
	}
	s.stop(time.Minute)
}

func post(url string) (int, string) {
	client := http.Client{Timeout: time.Minute}
	resp, err := client.Post(url, "application/json", strings.NewReader(`{"name": "fault"}`))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// descendants returns the processes below pid.
func descendants(t *testing.T, pid int) []int {
	t.Helper()
	var out []int
	for _, child := range childPIDs(t, pid) {
		out = append(append(out, child), descendants(t, child)...)
	}
	return out
}

// childPIDs returns the processes whose parent is pid.
func childPIDs(t *testing.T, pid int) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after
		// its closing parenthesis.
		i := strings.LastIndexByte(string(data), ')')
		fields := strings.Fields(string(data[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			out = append(out, child)
		}
	}
	return out
}

// zombie reports whether pid has exited and waits for its parent.
func zombie(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(data), ')')
	fields := strings.Fields(string(data[i+1:]))
	return len(fields) > 0 && fields[0] == "Z"
}
