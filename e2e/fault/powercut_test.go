package fault

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sless.kube5s.ru/sless/client"
	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/internal/testenv/powercut"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke/ledger/journal"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
	"sless.kube5s.ru/sless/modules/triggers"
)

// TestPowerCutJournalSync0 cuts the power under load with
// --journal-sync 0: no answered invocation may be lost.
func TestPowerCutJournalSync0(t *testing.T) { powerCut(t, "0", 0) }

// TestPowerCutJournalSyncDefault cuts the power under load with the
// default --journal-sync: only invocations answered in the last interval
// before the cut may be lost.
func TestPowerCutJournalSyncDefault(t *testing.T) { powerCut(t, "", journal.DefaultSyncInterval) }

// grace is how much earlier than the sync interval before a cut an
// invocation may have been answered and still be lost: the fsync that the
// interval promises runs on a loaded machine (CI runs packages in
// parallel). The oldest lost answer seen here was 83 ms old.
const grace = 200 * time.Millisecond

// powerCut runs the server on a power-cut disk (internal/testenv/powercut),
// with /fn load and a client that creates, uploads and waits for
// functions, and cuts the power twice. After each cut the server must start
// without repair, with the same API token, every function and trigger it
// answered 201 for, every uploaded code it answered 202 for, and functions
// it reported Ready running their own code (writer.check); at the end
// SQLite's integrity check must pass and the ledger must hold every
// invocation answered more than lossWindow (plus grace) before a cut.
func powerCut(t *testing.T, journalSync string, lossWindow time.Duration) {
	disk := powercut.Mount(t)
	s := newServer(t, disk.Dir, "")
	if journalSync != "" {
		s.args = []string{"--journal-sync", journalSync}
	}
	s.start()
	s.deploy()
	token := readToken(t, disk.Dir)
	api := &client.Client{Endpoint: s.endpoint, Token: token, HTTP: &http.Client{Timeout: 10 * time.Second}}
	l := startLoad(s.endpoint, conns)
	w := &writer{api: api}
	var cuts []time.Time
	for round := range 2 {
		w.start()
		l.waitAnswers(t, 300)
		w.waitReady(t, round*3+3)
		cuts = append(cuts, s.cutPower(disk))
		w.stop()
		s.start()
		if token2 := readToken(t, disk.Dir); token2 != token {
			t.Fatalf("after the cut the API token file holds another token")
		}
		checkToken(t, s, api)
		w.check(t)
		l.waitAnswers(t, 100)
	}
	l.stop()
	s.stop(time.Minute)
	checkSQLite(t, filepath.Join(disk.Dir, "sless.db"))
	checkLost(t, l, recordedIDs(t, "sqlite:"+filepath.Join(disk.Dir, "sless.db")), cuts, lossWindow)
}

// cutPower kills the server and every process it started with SIGKILL,
// then cuts the disk's power. It returns when the server was killed: no
// answer left it later.
func (s *server) cutPower(disk *powercut.Disk) time.Time {
	s.t.Helper()
	procs := descendants(s.t, s.cmd.Process.Pid)
	s.cmd.Process.Kill()
	killed := time.Now()
	for _, pid := range procs {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	<-s.done
	fmt.Fprintf(s.logs, "--- power cut %v\n", time.Now().Format(time.TimeOnly))
	disk.Cut()
	return killed
}

func readToken(t *testing.T, dataDir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dataDir, "api-token"))
	if err != nil {
		t.Fatalf("reading the API token: %v", err)
	}
	return strings.TrimSpace(string(data))
}

// checkToken checks that the token generated before the cut still works,
// for the API and for the CLI (which finds it in the data directory).
func checkToken(t *testing.T, s *server, api *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := api.Whoami(ctx); err != nil {
		t.Errorf("the API token generated before the cut: %v", err)
	}
	cmd := exec.CommandContext(ctx, binary, "fn", "list")
	cmd.Env = append(os.Environ(), "SLESS_DATA_DIR="+s.dataDir, "SLESS_ENDPOINT="+s.endpoint)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "hello") {
		t.Errorf("sless fn list after the cut: %v\n%s", err, out)
	}
}

// writer creates functions with code of their own and an http trigger
// each, one after the other, and keeps what the server answered.
type writer struct {
	api *client.Client
	n   int

	mu sync.Mutex
	// created and triggered are the functions and triggers answered 201,
	// uploaded those whose code was answered 202, ready those seen Ready
	// with their code.
	created, triggered, uploaded, ready []string
	// checked is how many of ready a check called.
	checked int
	stopCh  chan struct{}
	done    chan struct{}
}

func (w *writer) start() {
	w.stopCh, w.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stopCh:
				return
			default:
			}
			w.n++
			if err := w.deployOne(fmt.Sprintf("pc%d", w.n)); err != nil {
				time.Sleep(20 * time.Millisecond) // the server is down
			}
		}
	}()
}

func (w *writer) stop() {
	close(w.stopCh)
	<-w.done
}

// deployOne creates the function name, uploads its code, creates its http
// trigger and waits until it is Ready, recording each answer.
func (w *writer) deployOne(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fn := &functions.Function{Name: name, Namespace: "default", Spec: functions.Spec{Runtime: "python3.11"}}
	if _, err := w.api.CreateFunction(ctx, fn); err != nil {
		return err
	}
	w.record(&w.created, name)
	if _, err := w.api.UploadCode(ctx, "default", name, codeOf(name)); err != nil {
		return err
	}
	w.record(&w.uploaded, name)
	tr := &triggers.Trigger{Name: name, Namespace: "default", Spec: triggers.Spec{Function: name, Type: "http"}}
	if _, err := w.api.CreateTrigger(ctx, tr); err != nil {
		return err
	}
	w.record(&w.triggered, name)
	for {
		got, err := w.api.GetFunction(ctx, "default", name)
		if err != nil {
			return err
		}
		switch got.Status.Phase {
		case functions.PhaseReady:
			w.record(&w.ready, name)
			return nil
		case functions.PhaseFailed:
			return fmt.Errorf("%s failed: %s", name, got.Status.Message)
		}
		select {
		case <-w.stopCh:
			return errors.New("stopped")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (w *writer) record(list *[]string, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	*list = append(*list, name)
}

// waitReady waits until n functions were seen Ready.
func (w *writer) waitReady(t *testing.T, n int) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, fmt.Sprintf("%d functions Ready", n), func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.ready) >= n
	})
}

// maxRunChecks is how many functions seen Ready a check calls at most.
const maxRunChecks = 10

// check checks that every function and trigger answered 201 is there, that
// every function whose code was answered 202 is Ready with that code, and
// that the functions seen Ready since the last check (the newest
// maxRunChecks of them) run their own code.
func (w *writer) check(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, name := range w.created {
		if _, err := w.api.GetFunction(ctx, "default", name); err != nil {
			t.Errorf("function %s, created (201) before the cut: %v", name, err)
		}
	}
	for _, name := range w.triggered {
		if _, err := w.api.GetTrigger(ctx, "default", name); err != nil {
			t.Errorf("trigger %s, created (201) before the cut: %v", name, err)
		}
	}
	// Uploaded code is kept: a function whose build the cut interrupted
	// builds it again.
	for _, name := range w.uploaded {
		want := fmt.Sprintf("%x", sha256.Sum256(codeOf(name)))
		var got *functions.Function
		testenv.Eventually(t, 2*time.Minute, "function "+name+" to be Ready again", func() bool {
			var err error
			got, err = w.api.GetFunction(ctx, "default", name)
			return err == nil && got.Status.Phase != functions.PhasePending && got.Status.Phase != functions.PhaseBuilding
		})
		if got.CodeSHA256 != want || got.Status.Phase != functions.PhaseReady {
			t.Errorf("function %s, its code uploaded (202) before the cut: %s with code %q (%s); want Ready with %q",
				name, got.Status.Phase, got.CodeSHA256, got.Status.Message, want)
		}
	}
	// Each call of a function not called yet is a cold start: the newest
	// few, whose builds were the nearest to the cut, are enough.
	for _, name := range w.ready[max(w.checked, len(w.ready)-maxRunChecks):] {
		res, err := w.api.Invoke(ctx, "default", name, []byte(`{}`))
		switch {
		case err != nil:
			t.Errorf("function %s, Ready before the cut: %v", name, err)
		case res.StatusCode != http.StatusOK || !strings.Contains(string(res.Body), name):
			t.Errorf("function %s, Ready before the cut, answers %d %s; want 200 with its name", name, res.StatusCode, res.Body)
		}
	}
	t.Logf("after the cut: %d functions created, %d triggers, %d with code uploaded, %d Ready before the cut (the newest %d of them called)",
		len(w.created), len(w.triggered), len(w.uploaded), len(w.ready), len(w.ready)-max(w.checked, len(w.ready)-maxRunChecks))
	w.checked = len(w.ready)
}

// codeOf returns a zip whose handler answers with name, so that a function
// running another's code, or none, shows.
func codeOf(name string) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	f, _ := zw.Create("handler.py")
	fmt.Fprintf(f, "def handle(event, context):\n    return {%q: True}\n", name)
	zw.Close()
	return buf.Bytes()
}

// checkSQLite runs SQLite's integrity check on the database.
func checkSQLite(t *testing.T, path string) {
	t.Helper()
	db, _, err := sqldb.Open("sqlite:"+path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close(db)
	var res string
	if err := db.Raw("PRAGMA integrity_check").Scan(&res).Error; err != nil || res != "ok" {
		t.Errorf("the database after the power cuts: integrity_check %q, %v", res, err)
	}
}

// checkLost checks that every answered invocation is recorded, except those
// answered within window (plus grace) before a cut.
func checkLost(t *testing.T, l *load, recorded []string, cuts []time.Time, window time.Duration) {
	t.Helper()
	rec := map[string]bool{}
	for _, id := range recorded {
		rec[id] = true
	}
	allowed := window
	if window > 0 {
		allowed += grace
	}
	var lost, tooOld int
	var oldest time.Duration
	for i, id := range l.answered {
		if rec[id] {
			continue
		}
		lost++
		at := l.answeredAt[i]
		// The age of the answer at the first cut after it: an answer read
		// just after a kill left the server before it.
		age := time.Duration(1<<63 - 1) // after every cut: never allowed
		for _, c := range cuts {
			if at.Before(c.Add(grace)) {
				age = c.Sub(at)
				break
			}
		}
		if age > allowed {
			tooOld++
			if tooOld <= 3 {
				t.Errorf("invocation %s, answered %v before a cut, is not recorded (the journal syncs every %v)", id, age.Round(time.Millisecond), window)
			}
			continue
		}
		oldest = max(oldest, age)
	}
	t.Logf("%d answered, %d recorded, %d answered but lost: %d within %v before a cut (the oldest %v), %d older",
		len(l.answered), len(recorded), lost, lost-tooOld, allowed, oldest.Round(time.Millisecond), tooOld)
}
