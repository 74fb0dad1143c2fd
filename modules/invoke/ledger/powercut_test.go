package ledger_test

import (
	"path/filepath"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv/powercut"
	"sless.kube5s.ru/sless/modules/invoke/ledger"
	"sless.kube5s.ru/sless/modules/invoke/ledger/journal"
)

// TestRunEndSurvivesPowerCut: once a run's end returns, its record survives
// a power cut even when the journal is fsynced only every hour; a record
// of /fn, which has no end, is lost then (its answer waits for no fsync).
func TestRunEndSurvivesPowerCut(t *testing.T) {
	disk := powercut.Mount(t)
	db := openDB(t, sqliteURL(t), testLog(t))
	opts := ledger.Options{Journal: journal.Options{Dir: filepath.Join(disk.Dir, "journal"), SyncInterval: time.Hour}}
	// Not started: nothing reaches the database before the cut.
	l := open(t, db, opts)
	run, fn := simple("ns", "job"), simple("ns", "fn")
	end, err := l.Begin(run)
	if err != nil {
		t.Fatal(err)
	}
	l.Record(run)
	end()
	l.Record(fn) // after the fsync of end
	disk.Cut()

	stop(t, newLedger(t, db, opts)) // writes what the journal kept
	if n := countRows(t, db, "id = ? AND status_code = 200", run.ID); n != 1 {
		t.Errorf("the run's record after a power cut: %d rows, want 1", n)
	}
	if n := countRows(t, db, "id = ?", fn.ID); n != 0 {
		t.Errorf("the /fn record appended without an fsync: %d rows after a power cut, want 0 (the test cannot tell)", n)
	}
}
