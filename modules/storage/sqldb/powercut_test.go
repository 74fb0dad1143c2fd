package sqldb_test

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"sless.kube5s.ru/sless/internal/testenv/powercut"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// TestSQLiteCommitsSurvivePowerCut checks the contract of Open: a write is
// durable when it returns, also across a power cut. With SQLite's
// synchronous NORMAL the same commits are lost, which shows that the test
// can fail.
//
// It is skipped: it serves the power-cut disk and runs SQLite on it in one
// process, and SQLite maps its WAL index (the -shm file) into memory, so a
// page fault on that mapping blocks a thread of the Go runtime until the
// disk answers, while the disk's server waits for the runtime (a hang of
// the whole package, seen in a CI run). The power-cut tests of e2e/fault
// check the same contract with the real binary, which runs in a process of
// its own. Moving the database side into a child process would bring it
// back.
func TestSQLiteCommitsSurvivePowerCut(t *testing.T) {
	t.Skip("SQLite's memory-mapped WAL index on a FUSE disk served by the same process can hang the Go runtime; e2e/fault's power-cut tests cover this contract with the real binary")
	for _, tt := range []struct {
		name string
		// pragma is run on the one connection before the inserts.
		pragma string
		lost   bool
	}{
		{name: "as opened"},
		{name: "synchronous NORMAL", pragma: "PRAGMA synchronous=NORMAL", lost: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			disk := powercut.Mount(t)
			url := "sqlite:" + filepath.Join(disk.Dir, "data", "sless.db")
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			db, _, err := sqldb.Open(url, log)
			if err != nil {
				t.Fatal(err)
			}
			sqlDB, _ := db.DB()
			sqlDB.SetMaxOpenConns(1)
			if tt.pragma != "" {
				if err := db.Exec(tt.pragma).Error; err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Exec("CREATE TABLE t (n INTEGER)").Error; err != nil {
				t.Fatal(err)
			}
			const rows = 50
			for i := range rows {
				if err := db.Exec("INSERT INTO t VALUES (?)", i).Error; err != nil {
					t.Fatal(err)
				}
			}
			disk.Cut() // the database stays open: it never checkpoints
			sqlDB.Close()

			db, _, err = sqldb.Open(url, log)
			if err != nil {
				t.Fatal(err)
			}
			defer sqldb.Close(db)
			var n int
			err = db.Raw("SELECT count(*) FROM t").Scan(&n).Error
			switch {
			case tt.lost && (err == nil && n == rows):
				t.Errorf("all %d rows survived the power cut; want the commits since the checkpoint lost", rows)
			case !tt.lost && (err != nil || n != rows):
				t.Errorf("rows after the power cut: %d, %v; want %d", n, err, rows)
			}
			var check string
			if err := db.Raw("PRAGMA integrity_check").Scan(&check).Error; err != nil || check != "ok" {
				t.Errorf("integrity_check after the power cut: %q, %v", check, err)
			}
		})
	}
}
