package controller_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/controller"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// recorder counts reconciles per key and signals each one.
type recorder struct {
	mu      sync.Mutex
	counts  map[string]int
	calls   chan string
	fail    map[string]int // key -> number of failures before success
	active  map[string]bool
	overlap bool
}

func newRecorder() *recorder {
	return &recorder{counts: map[string]int{}, calls: make(chan string, 100), fail: map[string]int{}, active: map[string]bool{}}
}

func (r *recorder) reconcile(ctx context.Context, key string) (controller.Result, error) {
	r.mu.Lock()
	if r.active[key] {
		r.overlap = true
	}
	r.active[key] = true
	r.counts[key]++
	fail := r.fail[key] > 0
	if fail {
		r.fail[key]--
	}
	r.mu.Unlock()
	time.Sleep(time.Millisecond)
	r.mu.Lock()
	r.active[key] = false
	r.mu.Unlock()
	r.calls <- key
	if fail {
		return controller.Result{}, errors.New("transient")
	}
	return controller.Result{}, nil
}

func waitCalls(t *testing.T, r *recorder, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-r.calls:
		case <-time.After(5 * time.Second):
			t.Fatalf("got %d reconciles, want %d", i, n)
		}
	}
}

func TestResyncOnStartAndRetry(t *testing.T) {
	r := newRecorder()
	r.fail["b"] = 2
	list := func(context.Context) ([]string, error) { return []string{"a", "b"}, nil }
	c := controller.New("test", r.reconcile, list, 2, discard)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	waitCalls(t, r, 4) // a once, b three times (two failures, then success)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts["a"] != 1 || r.counts["b"] != 3 {
		t.Errorf("reconciles: %v; want a:1 b:3", r.counts)
	}
}

func TestOneKeyIsNeverReconciledTwiceAtOnce(t *testing.T) {
	r := newRecorder()
	c := controller.New("test", r.reconcile, func(context.Context) ([]string, error) { return nil, nil }, 4, discard)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		c.Enqueue("k")
		time.Sleep(100 * time.Microsecond)
	}
	// Deduplication makes the count anywhere from 1 to 50; wait for quiet.
	deadline := time.After(5 * time.Second)
	for quiet := false; !quiet; {
		select {
		case <-r.calls:
		case <-time.After(100 * time.Millisecond):
			quiet = true
		case <-deadline:
			t.Fatal("reconciles never stopped")
		}
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.overlap {
		t.Error("the same key was reconciled by two workers at once")
	}
	if r.counts["k"] < 1 || r.counts["k"] >= 50 {
		t.Errorf("%d reconciles of 50 enqueues; want deduplication to merge some", r.counts["k"])
	}
}

func TestStopCancelsReconciles(t *testing.T) {
	started := make(chan struct{})
	block := func(ctx context.Context, _ string) (controller.Result, error) {
		close(started)
		<-ctx.Done()
		return controller.Result{}, ctx.Err()
	}
	c := controller.New("test", block, func(context.Context) ([]string, error) { return []string{"x"}, nil }, 1, discard)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}
