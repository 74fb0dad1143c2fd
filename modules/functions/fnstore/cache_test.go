package fnstore

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

func TestCacheKeepsNothingReadAcrossAnInvalidation(t *testing.T) {
	c := newCache()
	k := functions.Key{Namespace: "ns", Name: "f"}
	epoch := c.begin()
	c.invalidate(k) // a write committed while the read was on its way
	c.fill(k, &functions.Function{Name: "f"}, epoch)
	if _, ok := c.get(k); ok {
		t.Fatal("a read that overlapped a write was kept")
	}
	c.fill(k, &functions.Function{Name: "f"}, c.begin())
	if _, ok := c.get(k); !ok {
		t.Fatal("a read after the write was not kept")
	}
}

func TestCacheGivesCopies(t *testing.T) {
	c := newCache()
	k := functions.Key{Namespace: "ns", Name: "f"}
	in := &functions.Function{Name: "f", Spec: functions.Spec{Env: map[string]string{"A": "1"}},
		Status: functions.Status{Conditions: []functions.Condition{{Type: "Ready"}}}}
	c.fill(k, in, c.begin())
	in.Env["A"] = "changed by the caller"
	out, _ := c.get(k)
	out.Env["A"], out.Status.Conditions[0].Type = "changed again", "changed"
	again, _ := c.get(k)
	if again.Env["A"] != "1" || again.Status.Conditions[0].Type != "Ready" {
		t.Fatalf("the cached function changed with its callers' copies: %+v", again)
	}
}

func TestCacheStaysWithinItsBudget(t *testing.T) {
	c := newCache()
	log := strings.Repeat("x", 64<<10)
	for i := range 1000 {
		c.fill(functions.Key{Namespace: "ns", Name: fmt.Sprint(i)}, &functions.Function{Status: functions.Status{BuildLog: log}}, c.begin())
	}
	if c.bytes > maxCacheBytes {
		t.Fatalf("the cache holds %d bytes, more than its budget of %d", c.bytes, maxCacheBytes)
	}
	total := 0
	for _, fn := range c.fns {
		total += cost(fn)
	}
	if total != c.bytes || len(c.fns) == 0 {
		t.Fatalf("the cache counts %d bytes for %d entries that cost %d", c.bytes, len(c.fns), total)
	}
}

// openSQLite returns a migrated SQLite database in a temporary directory.
func openSQLite(t *testing.T) *gorm.DB {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, _, err := sqldb.Open("sqlite:"+filepath.Join(t.TempDir(), "db"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Close(db) })
	if err := sqldb.Migrate(context.Background(), db, Migrations()); err != nil {
		t.Fatal(err)
	}
	return db
}

// What the store wrote, it reads back from the cache: a deploy's reads of
// its function cost no statement.
func TestStoreReadsWhatItWroteWithoutAStatement(t *testing.T) {
	db := openSQLite(t)
	var reads atomic.Int64
	if err := db.Callback().Query().Before("gorm:query").Register("test:count", func(*gorm.DB) { reads.Add(1) }); err != nil {
		t.Fatal(err)
	}
	s := New(db)
	ctx := context.Background()
	k := functions.Key{Namespace: "ns", Name: "f"}
	created, err := s.Create(ctx, &functions.Function{Namespace: "ns", Name: "f", Spec: functions.Spec{Runtime: "python3.11"}})
	if err != nil {
		t.Fatal(err)
	}
	check := func(step string, want *functions.Function) {
		t.Helper()
		got, err := s.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after %s, Get = %+v; want what the write returned, %+v", step, got, want)
		}
	}
	check("Create", created)
	// The function as the cache keeps it is the function as stored.
	s.cache.invalidate(k)
	check("Create, read from the database", created)
	reads.Store(0)
	coded, err := s.SetCode(ctx, k, "code-1")
	if err != nil {
		t.Fatal(err)
	}
	check("SetCode", coded)
	st := functions.Status{Phase: functions.PhaseReady, Message: "ready", UpdatedAt: time.Now(),
		Conditions: []functions.Condition{{Type: "Ready", Status: "True", LastTransitionTime: time.Now()}}}
	if err := s.UpdateStatus(ctx, k, st); err != nil {
		t.Fatal(err)
	}
	if n := reads.Load(); n != 0 {
		t.Fatalf("the store read its function %d times; want it served from the cache", n)
	}
	cached, _ := s.Get(ctx, k)
	s.cache.invalidate(k)
	check("UpdateStatus, read from the database", cached)
}

// Two writes of one function that run at once reach the cache in the order
// they committed: the one that committed first, held up on its way to the
// cache, does not replace the later one's function there.
func TestStoreCacheFollowsTheCommitOrder(t *testing.T) {
	db := openSQLite(t)
	type slowKey struct{}
	committed := make(chan struct{})
	err := db.Callback().Update().After("gorm:update").Register("test:slow", func(db *gorm.DB) {
		if db.Statement.Context.Value(slowKey{}) != nil {
			close(committed)
			time.Sleep(200 * time.Millisecond)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	s := New(db)
	ctx := context.Background()
	k := functions.Key{Namespace: "ns", Name: "f"}
	if _, err := s.Create(ctx, &functions.Function{Namespace: "ns", Name: "f", Spec: functions.Spec{Runtime: "python3.11"}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := s.SetCode(context.WithValue(ctx, slowKey{}, true), k, "code-1"); err != nil {
			t.Error(err)
		}
	})
	<-committed
	if err := s.UpdateStatus(ctx, k, functions.Status{Phase: functions.PhaseBuilding, Message: "second"}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	fn, err := s.Get(ctx, k)
	if err != nil || fn.CodeSHA256 != "code-1" || fn.Status.Message != "second" {
		t.Fatalf("Get = %+v, %v; want both writes (code-1, status second)", fn, err)
	}
}

// After concurrent writes and reads, a read gives the last write.
func TestStoreReadsItsLastWrite(t *testing.T) {
	db := openSQLite(t)
	ctx := context.Background()
	s := New(db)
	k := functions.Key{Namespace: "ns", Name: "f"}
	if _, err := s.Create(ctx, &functions.Function{Namespace: "ns", Name: "f", Spec: functions.Spec{Runtime: "python3.11"}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 50 {
				if i == 0 {
					if _, err := s.SetCode(ctx, k, fmt.Sprint("code-", j)); err != nil {
						t.Error(err)
					}
					continue
				}
				if i == 1 {
					if err := s.UpdateStatus(ctx, k, functions.Status{Phase: functions.PhaseBuilding, Message: fmt.Sprint(j)}); err != nil {
						t.Error(err)
					}
					continue
				}
				if _, err := s.Get(ctx, k); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	fn, err := s.Get(ctx, k)
	if err != nil || fn.CodeSHA256 != "code-49" || fn.Status.Message != "49" {
		t.Fatalf("Get = %+v, %v; want the last code (code-49) and status (49)", fn, err)
	}
	if err := s.Delete(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, k); err == nil {
		t.Fatal("Get after Delete found the function")
	}
}
