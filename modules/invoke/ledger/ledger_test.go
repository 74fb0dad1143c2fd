package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/invoke/ledger"
	"sless.kube5s.ru/sless/modules/invoke/ledger/journal"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// The same suite runs on both databases.
func TestLedgerSQLite(t *testing.T) { runSuite(t, sqliteURL) }

func TestLedgerPostgres(t *testing.T) {
	runSuite(t, func(t testing.TB) string { return testenv.Postgres(t) })
}

func sqliteURL(t testing.TB) string { return "sqlite:" + filepath.Join(t.TempDir(), "db.sqlite") }

// openDB opens and migrates a database, twice to check that migrating again
// is a no-op, and closes it when t ends.
func openDB(t testing.TB, url string, log *slog.Logger) *gorm.DB {
	t.Helper()
	db, _, err := sqldb.Open(url, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Close(db) })
	for range 2 {
		if err := sqldb.Migrate(context.Background(), db, ledger.Migrations()); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func testLog(t testing.TB) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

// open returns a ledger that is not started, with a journal in a new
// directory unless opts names one, fsynced at the default interval unless
// opts sets one.
func open(t testing.TB, db *gorm.DB, opts ledger.Options) *ledger.Ledger {
	t.Helper()
	if opts.Log == nil {
		opts.Log = testLog(t)
	}
	if opts.Journal.Dir == "" {
		opts.Journal.Dir = t.TempDir()
		opts.Journal.SyncInterval = journal.DefaultSyncInterval
	}
	l, err := ledger.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// newLedger returns a started ledger that is stopped when t ends.
func newLedger(t testing.TB, db *gorm.DB, opts ledger.Options) *ledger.Ledger {
	t.Helper()
	l := open(t, db, opts)
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, l) })
	return l
}

// stop stops l, which writes what it has queued.
func stop(t testing.TB, l *ledger.Ledger) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := l.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

func newID() string { return uuid.Must(uuid.NewV7()).String() }

// full is a record with every field set; its time has nanoseconds and a
// zone other than UTC, which the ledger stores as UTC microseconds.
func full(ns, fn string) *invoke.Record {
	return &invoke.Record{
		ID: newID(), Namespace: ns, Function: fn,
		TriggerKind: invoke.KindCron, TriggerName: "nightly",
		Method: "POST", Path: "/run?x=1",
		StartedAt:  time.Date(2025, 3, 14, 9, 26, 53, 589793238, time.FixedZone("MSK", 3*3600)),
		DurationMS: 12.5, QueueMS: 0.25, ColdStart: true, ColdStartMS: 7.125, HandlerMS: 3.0625,
		StatusCode: 504, Error: "handler timed out after 30s",
		RequestBytes: 1 << 20, ResponseBytes: 1<<40 + 1,
		Logs: "line 1\nстрока 2\n", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
	}
}

// simple is a successful http record started now.
func simple(ns, fn string) *invoke.Record {
	return &invoke.Record{ID: newID(), Namespace: ns, Function: fn, TriggerKind: invoke.KindHTTP,
		Method: "GET", Path: "/", StartedAt: time.Now(), StatusCode: 200, Logs: "hello"}
}

// stored is r as the ledger returns it.
func stored(r *invoke.Record) *invoke.Record {
	c := *r
	c.StartedAt = c.StartedAt.UTC().Truncate(time.Microsecond)
	return &c
}

func withoutLogs(r *invoke.Record) *invoke.Record {
	c := *r
	c.Logs = ""
	return &c
}

func ids(rs []*invoke.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

// newestFirst returns the ids of rs that keep selects, newest first.
func newestFirst(rs []*invoke.Record, keep func(*invoke.Record) bool) []string {
	var out []string
	for _, r := range slices.Backward(rs) {
		if keep(r) {
			out = append(out, r.ID)
		}
	}
	return out
}

// listAll follows the cursor through every page of q and returns the ids
// and the size of each page.
func listAll(t *testing.T, l invoke.Ledger, ns string, q invoke.Query) (all []string, sizes []int) {
	t.Helper()
	for {
		page, next, err := l.List(t.Context(), ns, q)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ids(page)...)
		sizes = append(sizes, len(page))
		if next == "" {
			return all, sizes
		}
		if next != page[len(page)-1].ID {
			t.Fatalf("next %q is not the last id of the page %q", next, page[len(page)-1].ID)
		}
		q.Continue = next
		if len(sizes) > 100 {
			t.Fatal("more than 100 pages: the cursor does not advance")
		}
	}
}

func countRows(t *testing.T, db *gorm.DB, where string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.Table("invocations").Where(where, args...).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

func runSuite(t *testing.T, newURL func(t testing.TB) string) {
	t.Run("records round-trip", func(t *testing.T) {
		db := openDB(t, newURL(t), testLog(t))
		l := newLedger(t, db, ledger.Options{})
		r := full("ns", "fn")
		dirty := simple("ns", "dirty")
		dirty.Logs, dirty.Error, dirty.DurationMS = "a\x00b\xffc", "bad \xfe", math.NaN()
		generated := &invoke.Record{Namespace: "gen", Function: "fn", StatusCode: 200}
		before := time.Now()
		for _, rec := range []*invoke.Record{r, dirty, generated} {
			l.Record(rec)
		}
		stop(t, l)

		got, err := l.Get(t.Context(), "ns", r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(stored(r), got); diff != "" {
			t.Errorf("Get (-want +got):\n%s", diff)
		}
		if got.StartedAt.Location() != time.UTC {
			t.Errorf("StartedAt is in %v, want UTC", got.StartedAt.Location())
		}
		page, next, err := l.List(t.Context(), "ns", invoke.Query{Function: "fn"})
		if err != nil || next != "" {
			t.Fatalf("List: next %q, %v", next, err)
		}
		if diff := cmp.Diff([]*invoke.Record{withoutLogs(stored(r))}, page); diff != "" {
			t.Errorf("List returns the record without logs (-want +got):\n%s", diff)
		}

		got, err = l.Get(t.Context(), "ns", dirty.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Logs != "ab\uFFFDc" || got.Error != "bad \uFFFD" || got.DurationMS != 0 {
			t.Errorf("cleaned record: logs %q, error %q, duration %v; want %q, %q, 0", got.Logs, got.Error, got.DurationMS, "ab\uFFFDc", "bad \uFFFD")
		}

		page, _, err = l.List(t.Context(), "gen", invoke.Query{})
		if err != nil || len(page) != 1 {
			t.Fatalf("List of the record without id and time: %v, %v", page, err)
		}
		id, err := uuid.Parse(page[0].ID)
		if err != nil || id.Version() != 7 {
			t.Errorf("generated id %q: version %d, %v; want a UUIDv7", page[0].ID, id.Version(), err)
		}
		if st := page[0].StartedAt; st.Before(before.Truncate(time.Microsecond)) || st.After(time.Now()) {
			t.Errorf("generated StartedAt %v is not the time of Record", st)
		}
	})

	t.Run("newest first in keyset pages", func(t *testing.T) {
		db := openDB(t, newURL(t), testLog(t))
		l := newLedger(t, db, ledger.Options{})
		var recs []*invoke.Record
		for i := range 120 {
			recs = append(recs, simple("ns", []string{"a", "b"}[i%2]))
		}
		for _, r := range recs {
			l.Record(r)
		}
		l.Record(simple("other", "a"))
		for range 501 {
			l.Record(simple("big", "a"))
		}
		stop(t, l)

		for _, tc := range []struct {
			q     invoke.Query
			want  []string
			sizes []int
		}{
			{invoke.Query{Limit: 50}, newestFirst(recs, func(*invoke.Record) bool { return true }), []int{50, 50, 20}},
			// A last page that is exactly full has no next cursor.
			{invoke.Query{Limit: 40}, newestFirst(recs, func(*invoke.Record) bool { return true }), []int{40, 40, 40}},
			{invoke.Query{Limit: 50, Function: "a"}, newestFirst(recs, func(r *invoke.Record) bool { return r.Function == "a" }), []int{50, 10}},
			{invoke.Query{Limit: 50, Function: "b"}, newestFirst(recs, func(r *invoke.Record) bool { return r.Function == "b" }), []int{50, 10}},
			// Zero is the default page size.
			{invoke.Query{}, newestFirst(recs, func(*invoke.Record) bool { return true }), []int{50, 50, 20}},
		} {
			got, sizes := listAll(t, l, "ns", tc.q)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%+v: ids (-want +got):\n%s", tc.q, diff)
			}
			if !slices.Equal(sizes, tc.sizes) {
				t.Errorf("%+v: page sizes %v, want %v", tc.q, sizes, tc.sizes)
			}
		}
		// A limit over the maximum is cut to it.
		if _, sizes := listAll(t, l, "big", invoke.Query{Limit: 100000}); !slices.Equal(sizes, []int{500, 1}) {
			t.Errorf("limit 100000: page sizes %v, want [500 1]", sizes)
		}
	})

	t.Run("filters", func(t *testing.T) {
		db := openDB(t, newURL(t), testLog(t))
		l := newLedger(t, db, ledger.Options{})
		var recs []*invoke.Record
		for i, c := range []struct {
			status     int
			kind, name string
		}{
			{200, invoke.KindHTTP, ""}, {201, invoke.KindCron, "nightly"}, {404, invoke.KindHTTP, ""},
			{500, invoke.KindRabbitMQ, "orders"}, {504, invoke.KindCron, "nightly"}, {399, invoke.KindJob, "backfill"},
			{400, invoke.KindCLI, ""}, {504, invoke.KindCron, "hourly"}, {200, invoke.KindRabbitMQ, "orders"},
		} {
			r := simple("ns", []string{"a", "b", "c"}[i%3])
			r.StatusCode, r.TriggerKind, r.TriggerName = c.status, c.kind, c.name
			recs = append(recs, r)
			l.Record(r)
		}
		stop(t, l)

		for _, tc := range []struct {
			q    invoke.Query
			keep func(*invoke.Record) bool
		}{
			{invoke.Query{Status: "success"}, func(r *invoke.Record) bool { return r.StatusCode < 400 }},
			{invoke.Query{Status: "error"}, func(r *invoke.Record) bool { return r.StatusCode >= 400 }},
			{invoke.Query{Status: "504"}, func(r *invoke.Record) bool { return r.StatusCode == 504 }},
			{invoke.Query{Status: "418"}, func(r *invoke.Record) bool { return false }},
			{invoke.Query{TriggerKind: "cron"}, func(r *invoke.Record) bool { return r.TriggerKind == "cron" }},
			{invoke.Query{TriggerKind: "cron", TriggerName: "nightly"}, func(r *invoke.Record) bool { return r.TriggerName == "nightly" }},
			{invoke.Query{TriggerName: "orders"}, func(r *invoke.Record) bool { return r.TriggerName == "orders" }},
			{invoke.Query{Function: "b"}, func(r *invoke.Record) bool { return r.Function == "b" }},
			{invoke.Query{Function: "b", Status: "error", TriggerKind: "cron"}, func(r *invoke.Record) bool {
				return r.Function == "b" && r.StatusCode >= 400 && r.TriggerKind == "cron"
			}},
			{invoke.Query{Function: "missing"}, func(r *invoke.Record) bool { return false }},
			{invoke.Query{Continue: recs[4].ID}, func(r *invoke.Record) bool { return r.ID < recs[4].ID }},
		} {
			got, _ := listAll(t, l, "ns", tc.q)
			if diff := cmp.Diff(newestFirst(recs, tc.keep), got); diff != "" {
				t.Errorf("%+v (-want +got):\n%s", tc.q, diff)
			}
		}

		for _, tc := range []struct {
			q     invoke.Query
			field string
		}{
			{invoke.Query{Status: "ok"}, "status"},
			{invoke.Query{Status: "600"}, "status"},
			{invoke.Query{Status: "99"}, "status"},
			{invoke.Query{TriggerKind: "webhook"}, "trigger_kind"},
			{invoke.Query{Continue: "not-an-id"}, "continue"},
			{invoke.Query{Continue: strings.ToUpper(recs[0].ID)}, "continue"},
		} {
			_, _, err := l.List(t.Context(), "ns", tc.q)
			var ve *validation.Errors
			if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != tc.field {
				t.Errorf("%+v: got %v, want a validation error of field %s", tc.q, err, tc.field)
			}
		}
	})

	t.Run("get", func(t *testing.T) {
		db := openDB(t, newURL(t), testLog(t))
		l := newLedger(t, db, ledger.Options{})
		r := simple("ns", "fn")
		l.Record(r)
		stop(t, l)
		got, err := l.Get(t.Context(), "ns", r.ID)
		if err != nil || got.Logs != "hello" {
			t.Fatalf("Get: %+v, %v; want the record with its logs", got, err)
		}
		for _, c := range []struct{ ns, id string }{{"other", r.ID}, {"ns", newID()}, {"ns", "garbage"}} {
			if _, err := l.Get(t.Context(), c.ns, c.id); !errors.Is(err, invoke.ErrNotFound) {
				t.Errorf("Get(%q, %q): got %v, want ErrNotFound", c.ns, c.id, err)
			}
		}
	})

	t.Run("stop writes everything queued", func(t *testing.T) {
		db := openDB(t, newURL(t), testLog(t))
		l := newLedger(t, db, ledger.Options{})
		const goroutines, each = 8, 2500
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for range each {
					l.Record(simple("ns", fmt.Sprint("fn-", g)))
				}
			})
		}
		wg.Wait()
		stop(t, l)
		if n := countRows(t, db, "1 = 1"); n != goroutines*each {
			t.Errorf("%d rows after Stop, want %d", n, goroutines*each)
		}

		if err := l.Start(t.Context()); err == nil {
			t.Error("Start after Stop succeeded")
		}
	})

	t.Run("a record after stop is written at the next start", func(t *testing.T) {
		db := openDB(t, newURL(t), testLog(t))
		dir := t.TempDir()
		opts := ledger.Options{Journal: journal.Options{Dir: dir, SyncInterval: journal.DefaultSyncInterval}}
		stop(t, newLedger(t, db, opts))
		l := open(t, db, opts)
		stop(t, l)
		late := simple("ns", "late")
		l.Record(late)
		next := newLedger(t, db, opts)
		if _, err := next.Get(t.Context(), "ns", late.ID); err != nil {
			t.Errorf("a record after Stop, read by the next ledger: %v", err)
		}
	})

	t.Run("a run the server stopped during is recorded as interrupted", func(t *testing.T) {
		type step int
		const (
			crash      step = iota // the server is killed: nothing is stopped
			record                 // the run's record is recorded
			end                    // the run ends
			drain                  // the writer wrote the record to the database
			stopLedger             // the server stops with the run in progress
		)
		for _, tc := range []struct {
			name  string
			steps []step
			want  int
		}{
			{"without a record", []step{crash}, invoke.InterruptedStatus},
			{"in progress at stop", []step{stopLedger}, invoke.InterruptedStatus},
			{"recorded, not ended", []step{record, crash}, 200},
			{"recorded and ended", []step{record, end, crash}, 200},
			{"recorded in the database, not ended", []step{record, drain, stopLedger}, 200},
		} {
			t.Run(tc.name, func(t *testing.T) {
				db := openDB(t, newURL(t), testLog(t))
				opts := ledger.Options{Journal: journal.Options{Dir: t.TempDir(), SyncInterval: journal.DefaultSyncInterval}}
				l := open(t, db, opts)
				run := &invoke.Record{ID: newID(), Namespace: "ns", Function: "fn", TriggerKind: invoke.KindRabbitMQ,
					TriggerName: "orders", Method: "POST", Path: "/", StartedAt: time.Now()}
				endRun, err := l.Begin(run)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range tc.steps {
					switch s {
					case record:
						done := *run
						done.StatusCode, done.DurationMS = 200, 5
						l.Record(&done)
					case end:
						endRun()
					case drain:
						if err := l.Start(t.Context()); err != nil {
							t.Fatal(err)
						}
						if _, err := l.Get(t.Context(), "ns", run.ID); err != nil {
							t.Fatal(err)
						}
					case stopLedger:
						stop(t, l)
					}
				}
				next := newLedger(t, db, opts)
				got, err := next.Get(t.Context(), "ns", run.ID)
				if err != nil {
					t.Fatal(err)
				}
				want := stored(run)
				want.StatusCode = tc.want
				if tc.want == 200 {
					want.DurationMS = 5
				} else {
					want.Error = invoke.InterruptedError
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("the run's record (-want +got):\n%s", diff)
				}
				stop(t, next)
				if n := countRows(t, db, "1 = 1"); n != 1 {
					t.Errorf("%d records, want 1", n)
				}
			})
		}
	})

	t.Run("a failed batch is retried until written", func(t *testing.T) {
		db := openDB(t, newURL(t), testLog(t))
		failed := make(chan struct{}, 1)
		log := slog.New(notifyHandler{Handler: slog.NewTextHandler(t.Output(), nil), msg: "writing invocation records to the database failed; they wait in the journal, retrying", ch: failed})
		l := newLedger(t, db, ledger.Options{Log: log})
		// Without its table the database refuses the batch, as a database
		// that is down would.
		exec(t, db, "ALTER TABLE invocations RENAME TO invocations_away")
		r := simple("ns", "fn")
		l.Record(r)
		select {
		case <-failed:
		case <-time.After(time.Minute):
			t.Fatal("no failed attempt logged")
		}
		exec(t, db, "ALTER TABLE invocations_away RENAME TO invocations")
		stop(t, l)
		if _, err := l.Get(t.Context(), "ns", r.ID); err != nil {
			t.Errorf("the retried record: %v", err)
		}
	})

	t.Run("stop without start writes the queue", func(t *testing.T) {
		db := openDB(t, newURL(t), testLog(t))
		l := open(t, db, ledger.Options{Log: testLog(t)})
		for range 10 {
			l.Record(simple("ns", "fn"))
		}
		stop(t, l)
		if n := countRows(t, db, "1 = 1"); n != 10 {
			t.Errorf("%d rows, want 10", n)
		}
	})

	t.Run("stop leaves what a dead database refused in the journal", func(t *testing.T) {
		url := newURL(t)
		db := openDB(t, url, testLog(t))
		opts := ledger.Options{Journal: journal.Options{Dir: t.TempDir(), SyncInterval: journal.DefaultSyncInterval}}
		l := newLedger(t, db, opts)
		if err := sqldb.Close(db); err != nil {
			t.Fatal(err)
		}
		var recs []*invoke.Record
		for range 10 {
			r := simple("ns", "fn")
			recs = append(recs, r)
			l.Record(r)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := l.Stop(ctx); err != nil {
			t.Errorf("Stop: %v, want nil: the records are in the journal", err)
		}
		if d := time.Since(start); d > 1500*time.Millisecond {
			t.Errorf("Stop took %v, past its deadline of 1.5s", d)
		}
		// The next ledger, on a database that works, writes them.
		next := newLedger(t, openDB(t, url, testLog(t)), opts)
		stop(t, next)
		for _, r := range recs {
			if _, err := next.Get(t.Context(), "ns", r.ID); err != nil {
				t.Errorf("record %s after the restart: %v", r.ID, err)
			}
		}
	})

	t.Run("get finds a record the writer has not written yet", func(t *testing.T) {
		db := openDB(t, newURL(t), testLog(t))
		// The writer waits 2s for a batch to fill: a Get at once finds the
		// record only by waiting for the writer.
		l := newLedger(t, db, ledger.Options{FlushInterval: 2 * time.Second})
		r := simple("ns", "fn")
		l.Record(r)
		if _, err := l.Get(t.Context(), "ns", r.ID); err != nil {
			t.Errorf("Get right after Record: %v", err)
		}
	})

	t.Run("list shows a record the writer has not written yet", func(t *testing.T) {
		db := openDB(t, newURL(t), testLog(t))
		// As above: a List at once shows the record only by waiting.
		l := newLedger(t, db, ledger.Options{FlushInterval: 2 * time.Second})
		r := simple("ns", "fn")
		l.Record(r)
		got, _, err := l.List(t.Context(), "ns", invoke.Query{Function: "fn"})
		if err != nil || len(got) != 1 || got[0].ID != r.ID {
			t.Errorf("List right after Record = %d records, %v; want the one recorded", len(got), err)
		}
	})

	t.Run("a crashed ledger's records are written at the next start, once", func(t *testing.T) {
		db := openDB(t, newURL(t), testLog(t))
		dir := t.TempDir()
		opts := ledger.Options{Journal: journal.Options{Dir: dir, SyncInterval: journal.DefaultSyncInterval}}
		// Never started nor stopped: its process died after Record.
		crashed := open(t, db, opts)
		var recs []*invoke.Record
		for range 100 {
			r := simple("ns", "fn")
			recs = append(recs, r)
			crashed.Record(r)
		}
		stop(t, newLedger(t, db, opts))
		if n := countRows(t, db, "1 = 1"); n != 100 {
			t.Fatalf("%d rows after the restart, want 100", n)
		}
		// A lost checkpoint replays records already written: they are
		// stored once.
		os.Remove(filepath.Join(dir, "checkpoint"))
		crashed = open(t, db, opts)
		crashed.Record(simple("ns", "fn"))
		stop(t, newLedger(t, db, opts))
		if n := countRows(t, db, "1 = 1"); n != 101 {
			t.Errorf("%d rows after replaying a journal without checkpoint, want 101", n)
		}
	})

	t.Run("a full journal refuses, keeps what it refused, and recovers", func(t *testing.T) {
		db := openDB(t, newURL(t), testLog(t))
		l := newLedger(t, db, ledger.Options{Journal: journal.Options{Dir: t.TempDir(), SyncInterval: journal.DefaultSyncInterval,
			MaxBytes: 1 << 20, SegmentBytes: 64 << 10}})
		// The database refuses, so the journal fills.
		exec(t, db, "ALTER TABLE invocations RENAME TO invocations_away")
		var recs []*invoke.Record
		for l.Accepting() == nil {
			r := full("ns", "fn")
			recs = append(recs, r)
			l.Record(r)
			if len(recs) > 1<<20 {
				t.Fatal("the journal never filled")
			}
		}
		if err := l.Accepting(); !errors.Is(err, ledger.ErrNotRecording) || !strings.Contains(err.Error(), "size limit") {
			t.Errorf("Accepting: got %v, want ErrNotRecording saying the journal reached its limit", err)
		}
		if err := l.Check(t.Context()); err == nil {
			t.Error("the readiness check passes while the journal refuses records")
		}
		// One more in flight when the journal filled up.
		late := full("ns", "fn")
		recs = append(recs, late)
		l.Record(late)
		exec(t, db, "ALTER TABLE invocations_away RENAME TO invocations")
		testenv.Eventually(t, time.Minute, "the journal to accept records again", func() bool { return l.Accepting() == nil })
		stop(t, l)
		if n := countRows(t, db, "1 = 1"); n != int64(len(recs)) {
			t.Errorf("%d rows, want %d", n, len(recs))
		}
		if _, err := l.Get(t.Context(), "ns", late.ID); err != nil {
			t.Errorf("the record the full journal refused: %v", err)
		}
	})

	t.Run("retention", func(t *testing.T) {
		db := openDB(t, newURL(t), testLog(t))
		postgres := db.Dialector.Name() == "postgres"
		now := time.Now()
		old, older := now.AddDate(0, 0, -10), now.AddDate(0, 0, -20)
		// Not started: the test runs the maintenance at chosen times.
		l := open(t, db, ledger.Options{Retention: 7 * 24 * time.Hour, Log: testLog(t)})
		l.SetDeleteBatch(25)
		if postgres {
			// The old day gets partitions; the older day's rows go to the
			// default partition.
			if err := l.MaintainAt(t.Context(), old); err != nil {
				t.Fatal(err)
			}
			if !tableExists(t, db, partition(old)) {
				t.Fatalf("no partition %s after maintenance at %v", partition(old), old)
			}
		}
		for i := range 30 {
			for _, at := range []time.Time{old, older, now} {
				r := simple("ns", "fn")
				r.StartedAt = at.Add(time.Duration(i) * time.Millisecond)
				l.Record(r)
			}
		}
		stop(t, l)

		keepAll := open(t, db, ledger.Options{Log: testLog(t)})
		if err := keepAll.MaintainAt(t.Context(), now); err != nil {
			t.Fatal(err)
		}
		if n := countRows(t, db, "1 = 1"); n != 90 {
			t.Errorf("%d rows after maintenance without retention, want 90", n)
		}
		for range 2 { // the second run has nothing left to do
			if err := l.MaintainAt(t.Context(), now); err != nil {
				t.Fatal(err)
			}
		}
		// SQLite compares times as text, so the parameter must be UTC as
		// stored.
		cutoff := now.AddDate(0, 0, -7).UTC()
		if n := countRows(t, db, "started_at < ?", cutoff); n != 0 {
			t.Errorf("%d rows older than the retention remain", n)
		}
		if n := countRows(t, db, "started_at >= ?", cutoff); n != 30 {
			t.Errorf("%d new rows remain, want 30", n)
		}
		if !postgres {
			return
		}
		if tableExists(t, db, partition(old)) {
			t.Errorf("the expired partition %s still exists", partition(old))
		}
		// Today's rows, written before today's partition existed, moved into
		// it when it was created.
		for name, want := range map[string]int64{partition(now): 30, "invocations_default": 0} {
			var n int64
			if err := db.Table(name).Count(&n).Error; err != nil || n != want {
				t.Errorf("%s has %d rows (%v), want %d", name, n, err, want)
			}
		}
		for _, day := range []time.Time{now.AddDate(0, 0, 1), now.AddDate(0, 0, 2)} {
			if !tableExists(t, db, partition(day)) {
				t.Errorf("no partition ahead for %s", day.UTC().Format(time.DateOnly))
			}
		}
	})

	t.Run("schema", func(t *testing.T) {
		db := openDB(t, newURL(t), testLog(t))
		var n int64
		err := db.Table("schema_migrations").Where("module = ?", "invoke").Count(&n).Error
		if want := int64(len(ledger.Migrations())); err != nil || n != want {
			t.Errorf("schema_migrations rows of invoke: %d, %v; want %d", n, err, want)
		}
		if db.Dialector.Name() != "postgres" {
			return
		}
		var kind string
		if err := db.Raw("SELECT relkind::text FROM pg_class WHERE oid = 'invocations'::regclass").Scan(&kind).Error; err != nil || kind != "p" {
			t.Errorf("invocations has relkind %q (%v), want p (partitioned)", kind, err)
		}
	})
}

// notifyHandler signals ch when a record with message msg is logged.
type notifyHandler struct {
	slog.Handler
	msg string
	ch  chan<- struct{}
}

func (h notifyHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return h.Handler.Handle(ctx, r)
}

func exec(t *testing.T, db *gorm.DB, sql string) {
	t.Helper()
	if err := db.Exec(sql).Error; err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// partition is the name of the PostgreSQL partition of t's day.
func partition(t time.Time) string { return "invocations_p" + t.UTC().Format("20060102") }

func tableExists(t *testing.T, db *gorm.DB, name string) bool {
	t.Helper()
	var found *string
	if err := db.Raw("SELECT to_regclass(?)::text", name).Scan(&found).Error; err != nil {
		t.Fatal(err)
	}
	return found != nil
}

// BenchmarkRecord measures records per second through Record and Stop: how
// fast the writer drains a full queue.
func BenchmarkRecord(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) { benchmarkRecord(b, sqliteURL(b)) })
	b.Run("postgres", func(b *testing.B) { benchmarkRecord(b, testenv.Postgres(b)) })
}

func benchmarkRecord(b *testing.B, url string) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db := openDB(b, url, log)
	l := open(b, db, ledger.Options{Log: log})
	if err := l.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	r := full("ns", "fn")
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		r.ID = newID()
		l.Record(r)
	}
	if err := l.Stop(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
}

// BenchmarkInsert measures the database writer's cost per record: batches
// of 500 records (the default BatchSize) inserted into SQLite, in CPU
// microseconds of the whole process per record.
func BenchmarkInsert(b *testing.B) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	l := open(b, openDB(b, sqliteURL(b), log), ledger.Options{Log: log})
	batch := make([]*invoke.Record, ledger.DefaultBatchSize)
	var ru0 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for range b.N {
		for i := range batch {
			batch[i] = full("ns", "fn")
		}
		if err := l.InsertRecords(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	var ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/1e3/float64(b.N*len(batch)), "cpu-µs/record")
}

// BenchmarkRecordJournal measures what Record costs an invocation: cleaning
// and encoding the record and appending it to the journal, from 32
// goroutines, with the journal fsynced every 100ms (the default) or before
// every answer. cpu-µs/op is the CPU the whole process spent per record,
// fsyncs included; the database writer is not running.
func BenchmarkRecordJournal(b *testing.B) {
	for _, tc := range []struct {
		name string
		sync time.Duration
	}{{"sync=100ms", journal.DefaultSyncInterval}, {"sync=always", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			l := open(b, openDB(b, sqliteURL(b), log), ledger.Options{Log: log,
				Journal: journal.Options{Dir: b.TempDir(), SyncInterval: tc.sync, MaxBytes: 1 << 40}})
			b.SetParallelism(32)
			var ru0 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := full("ns", "fn")
				r.Logs = strings.Repeat("a line the handler printed\n", 8)
				for pb.Next() {
					l.Record(r)
				}
			})
			b.StopTimer()
			var ru1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			b.ReportMetric(float64(cpu)/1e3/float64(b.N), "cpu-µs/op")
			if err := l.Accepting(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkRecordLatency measures the latency Record adds to an answer at
// one connection: the proxy records an invocation before its response is
// flushed, so each call's duration is added to what the client waits. It
// reports the median and the 99th percentile of single calls from one
// goroutine, next to the same percentiles of an empty timed call measured
// in the same run (the clock's own cost), with the database writer
// running as in a server.
func BenchmarkRecordLatency(b *testing.B) {
	for _, tc := range []struct {
		name string
		sync time.Duration
	}{{"sync=100ms", journal.DefaultSyncInterval}, {"sync=always", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			l := open(b, openDB(b, sqliteURL(b), log), ledger.Options{Log: log,
				Journal: journal.Options{Dir: b.TempDir(), SyncInterval: tc.sync, MaxBytes: 1 << 40}})
			r := full("ns", "fn")
			r.Logs = strings.Repeat("a line the handler printed\n", 8)
			took := make([]time.Duration, 0, b.N)
			clock := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				l.Record(r)
				took = append(took, time.Since(start))
				start = time.Now()
				clock = append(clock, time.Since(start))
			}
			b.StopTimer()
			b.ReportMetric(percentile(took, 50).Seconds()*1e6, "p50-µs")
			b.ReportMetric(percentile(took, 99).Seconds()*1e6, "p99-µs")
			b.ReportMetric(percentile(clock, 50).Seconds()*1e6, "clock-p50-µs")
			if err := l.Accepting(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// percentile returns the p-th percentile of ds, which it sorts.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[(len(ds)-1)*p/100]
}

// Maintenance that creates the partition of a day whose rows sit in the
// default partition moves them into it, and it may drop expired partitions
// in the same transaction. A read that arrives meanwhile waits for it, and
// must then find the moved rows, and not deadlock with it. The test holds a
// lock on the default partition, so that maintenance stops at attaching the
// partition, after moving the rows, until the read waits too.
func TestPostgresReadsWhilePartitionsChange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		expire bool
	}{{"creating a partition", false}, {"creating and dropping partitions", true}} {
		t.Run(tc.name, func(t *testing.T) {
			db := openDB(t, testenv.Postgres(t), testLog(t))
			now := time.Now()
			opts := ledger.Options{}
			if tc.expire {
				opts.Retention = 7 * 24 * time.Hour
			}
			// Not started: the test runs the maintenance.
			l := open(t, db, opts)
			if tc.expire {
				if err := l.MaintainAt(t.Context(), now.AddDate(0, 0, -10)); err != nil {
					t.Fatal(err)
				}
			}
			// Today has no partition yet: the record goes to the default one.
			r := simple("ns", "fn")
			r.StartedAt = now
			l.Record(r)
			stop(t, l)

			blocker := db.Begin()
			defer blocker.Rollback()
			if err := blocker.Exec("LOCK TABLE invocations_default IN ACCESS SHARE MODE").Error; err != nil {
				t.Fatal(err)
			}
			maintained := make(chan error, 1)
			go func() { maintained <- l.MaintainAt(context.Background(), now) }()
			testenv.Eventually(t, time.Minute, "maintenance to wait for the default partition", func() bool { return lockWaiters(t, db) == 1 })
			type listing struct {
				ids []string
				err error
			}
			listed := make(chan listing, 1)
			go func() {
				page, _, err := l.List(context.Background(), "ns", invoke.Query{})
				listed <- listing{ids(page), err}
			}()
			testenv.Eventually(t, time.Minute, "the listing to wait for maintenance", func() bool { return lockWaiters(t, db) == 2 })
			if err := blocker.Commit().Error; err != nil {
				t.Fatal(err)
			}
			if err := <-maintained; err != nil {
				t.Errorf("maintenance: %v", err)
			}
			if got := <-listed; got.err != nil || !slices.Equal(got.ids, []string{r.ID}) {
				t.Errorf("the listing during maintenance: %v, %v; want [%s]", got.ids, got.err, r.ID)
			}
			if !tableExists(t, db, partition(now)) {
				t.Errorf("no partition %s after maintenance", partition(now))
			}
		})
	}
}

// lockWaiters is how many lock requests on the invocations table or its
// default partition wait.
func lockWaiters(t *testing.T, db *gorm.DB) int64 {
	t.Helper()
	var n int64
	err := db.Raw(`SELECT count(*) FROM pg_locks WHERE NOT granted
		AND relation IN ('invocations'::regclass, 'invocations_default'::regclass)`).Scan(&n).Error
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestInsertManyRows: a batch larger than one multi-row INSERT is written
// whole, with every field, and writing it again (a retry after a lost
// commit answer) adds nothing.
func TestInsertManyRows(t *testing.T) {
	log := testLog(t)
	db := openDB(t, sqliteURL(t), log)
	l := open(t, db, ledger.Options{Log: log})
	batch := make([]*invoke.Record, 123) // two multi-row INSERTs and 23 single rows
	for i := range batch {
		batch[i] = full("ns", "fn")
		batch[i].StatusCode = 200 + i
	}
	for range 2 {
		if err := l.InsertRecords(t.Context(), batch); err != nil {
			t.Fatal(err)
		}
	}
	var n int64
	if err := db.Table("invocations").Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	if n != int64(len(batch)) {
		t.Errorf("stored %d rows, want %d", n, len(batch))
	}
	for _, i := range []int{0, 49, 50, 99, 100, 122} {
		got, err := l.Get(t.Context(), "ns", batch[i].ID)
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		if got.StatusCode != 200+i || got.Logs != batch[i].Logs || got.Path != batch[i].Path {
			t.Errorf("row %d: got status %d logs %q path %q", i, got.StatusCode, got.Logs, got.Path)
		}
	}
}
