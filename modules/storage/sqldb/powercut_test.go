package sqldb_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv/powercut"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// The power-cut test runs SQLite in child processes, the test binary run
// again with envHelper set, while the power-cut disk is served by the test
// process: SQLite maps its WAL index (the -shm file) into memory, and a page
// fault on that mapping in the process that serves the disk blocks a thread
// of the Go runtime until the disk answers, while the disk's server may wait
// for that thread (a hang of the whole package, seen in a CI run).
const (
	// envHelper names what the child does: helperWrite or helperCheck.
	envHelper = "SLESS_SQLDB_POWERCUT_HELPER"
	// envDB is the database's path on the disk.
	envDB = "SLESS_SQLDB_POWERCUT_DB"
	// envBypass, when set, makes the writer insert through database/sql
	// directly, past the commits that Open installs on gorm.
	envBypass = "SLESS_SQLDB_POWERCUT_BYPASS"

	// helperWrite creates table t and inserts rows 0, 1, 2, ... from
	// helperWriters goroutines until it is killed, printing "committed N"
	// once the insert of row N returned.
	helperWrite = "write"
	// helperCheck prints "rows N1,N2,..." (the rows of t, or "rows none"
	// when t is missing) and "integrity R", the result of integrity_check.
	helperCheck = "check"
)

// helperWriters is how many goroutines of the writer insert at once, so
// that commits share fsyncs.
const helperWriters = 4

// helperTimeout bounds each child: the writer until it has reported the
// commits the test waits for, the checker until it has answered. The disk
// answers in microseconds; the margin is for a loaded CI machine.
const helperTimeout = time.Minute

// TestSQLiteCommitsSurvivePowerCut checks the contract of Open: a write is
// durable when it returns, also across a power cut. A child process commits
// rows on the power-cut disk from several goroutines and reports each once
// its commit returned; the test kills it while it commits, cuts the power
// and checks, in another child, that every reported row is there. The same
// commits made past the shared fsync of Open's commits (database/sql
// directly, with SQLite's synchronous NORMAL) are lost, which shows that
// the test can fail.
func TestSQLiteCommitsSurvivePowerCut(t *testing.T) {
	for _, tt := range []struct {
		name   string
		bypass bool // write through database/sql, past Open's commits
		lost   bool
	}{
		{name: "as opened"},
		{name: "past the shared fsync", bypass: true, lost: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			disk := powercut.Mount(t)
			db := filepath.Join(disk.Dir, "data", "sless.db")
			// The cut comes while the writer commits row cutAfter or later.
			const cutAfter = 50
			committed := writeUntilCut(t, disk, db, tt.bypass, cutAfter)

			rows, integrity := checkDB(t, db)
			var missing []int
			for _, n := range committed {
				if !rows[n] {
					missing = append(missing, n)
				}
			}
			switch {
			case tt.lost && len(missing) == 0:
				t.Errorf("all %d rows reported committed survived the power cut; want the commits since the checkpoint lost", len(committed))
			case !tt.lost && len(missing) > 0:
				t.Errorf("%d of the %d rows reported committed are missing after the power cut: %v", len(missing), len(committed), missing)
			}
			if integrity != "ok" {
				t.Errorf("integrity_check after the power cut: %q", integrity)
			}
		})
	}
}

// writeUntilCut runs the writer child on db until it reported at least
// cutAfter commits, kills it, cuts the disk's power and returns the rows
// it reported committed.
func writeUntilCut(t *testing.T, disk *powercut.Disk, db string, bypass bool, cutAfter int) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), helperTimeout)
	defer cancel()
	var env []string
	if bypass {
		env = append(env, envBypass+"=1")
	}
	cmd := helperCommand(ctx, helperWrite, db, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the writer: %v", err)
	}
	var committed []int
	sc := bufio.NewScanner(stdout)
	for len(committed) < cutAfter && sc.Scan() {
		n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "committed "))
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("writer: unexpected line %q\n%s", sc.Text(), stderr.String())
		}
		committed = append(committed, n)
	}
	if len(committed) < cutAfter {
		// The scan ended: the writer exited, or was killed at the timeout.
		err := cmd.Wait()
		t.Fatalf("writer reported %d commits, want %d, before it ended (%v; a timeout after %v kills it):\n%s", len(committed), cutAfter, err, helperTimeout, stderr.String())
	}
	// The power goes while the writer commits: first every process using
	// the disk dies, then the disk loses what was not durable.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill the writer: %v", err)
	}
	// Commits it reported between the last line read and its death count
	// too.
	for sc.Scan() {
		if n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "committed ")); err == nil {
			committed = append(committed, n)
		}
	}
	var exitErr *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exitErr) || exitErr.ExitCode() != -1 {
		t.Fatalf("writer ended with %v, want killed:\n%s", err, stderr.String())
	}
	disk.Cut()
	return committed
}

// checkDB runs the checker child on db and returns the rows of table t and
// the result of integrity_check.
func checkDB(t *testing.T, db string) (rows map[int]bool, integrity string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), helperTimeout)
	defer cancel()
	out, err := helperCommand(ctx, helperCheck, db).CombinedOutput()
	if err != nil {
		t.Fatalf("checker (killed after %v): %v\n%s", helperTimeout, err, out)
	}
	rows = map[int]bool{}
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSpace(line)
		if list, ok := strings.CutPrefix(line, "rows "); ok && list != "none" {
			for f := range strings.SplitSeq(list, ",") {
				n, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("checker: unexpected line %q", line)
				}
				rows[n] = true
			}
		}
		if r, ok := strings.CutPrefix(line, "integrity "); ok {
			integrity = r
		}
	}
	if integrity == "" {
		t.Fatalf("checker gave no result:\n%s", out)
	}
	return rows, integrity
}

// helperCommand runs this test binary as the helper of kind on db, with
// extra environment variables; ctx's end kills it.
func helperCommand(ctx context.Context, kind, db string, env ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSQLitePowerCutHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{envHelper + "=" + kind, envDB + "=" + db}, env...)...)
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// TestSQLitePowerCutHelper is the child of TestSQLiteCommitsSurvivePowerCut;
// it skips unless run as one.
func TestSQLitePowerCutHelper(t *testing.T) {
	kind := os.Getenv(envHelper)
	if kind == "" {
		t.Skip("run by TestSQLiteCommitsSurvivePowerCut")
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, _, err := sqldb.Open("sqlite:"+os.Getenv(envDB), log)
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close(db)
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	switch kind {
	case helperWrite:
		if err := db.Exec("CREATE TABLE t (n INTEGER)").Error; err != nil {
			t.Fatal(err)
		}
		insert := func(n int) error { return db.Exec("INSERT INTO t VALUES (?)", n).Error }
		if os.Getenv(envBypass) != "" {
			insert = func(n int) error {
				_, err := sqlDB.Exec("INSERT INTO t VALUES (?)", n)
				return err
			}
		}
		// Until killed; the bound only keeps a lost parent from filling
		// the disk.
		var wg sync.WaitGroup
		for w := range helperWriters {
			wg.Go(func() {
				for n := w; n < 1_000_000; n += helperWriters {
					if err := insert(n); err != nil {
						t.Error(err)
						return
					}
					fmt.Printf("committed %d\n", n)
				}
			})
		}
		wg.Wait()
	case helperCheck:
		var rows []string
		if err := db.Raw("SELECT n FROM t ORDER BY n").Scan(&rows).Error; err != nil {
			if !strings.Contains(err.Error(), "no such table") {
				t.Fatal(err)
			}
		}
		if len(rows) == 0 {
			rows = []string{"none"}
		}
		fmt.Printf("rows %s\n", strings.Join(rows, ","))
		var check string
		if err := db.Raw("PRAGMA integrity_check").Scan(&check).Error; err != nil {
			t.Fatal(err)
		}
		fmt.Printf("integrity %s\n", check)
	default:
		t.Fatalf("%s=%q: want %q or %q", envHelper, kind, helperWrite, helperCheck)
	}
}
