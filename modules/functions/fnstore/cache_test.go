package fnstore

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

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

// After concurrent writes and reads, a read gives the last write.
func TestStoreReadsItsLastWrite(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, _, err := sqldb.Open("sqlite:"+filepath.Join(t.TempDir(), "db"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Close(db) })
	ctx := context.Background()
	if err := sqldb.Migrate(ctx, db, Migrations()); err != nil {
		t.Fatal(err)
	}
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
