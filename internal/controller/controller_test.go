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
	"sless.kube5s.ru/sless/modules/reconciler"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// recorder counts reconciles per key and signals each one.
type recorder struct {
	mu     sync.Mutex
	counts map[string]int
	calls  chan string
	fail   map[string]int // key -> number of failures before success
}

func newRecorder() *recorder {
	return &recorder{counts: map[string]int{}, calls: make(chan string, 100), fail: map[string]int{}}
}

func (r *recorder) reconcile(ctx context.Context, key string) (reconciler.Result, error) {
	r.mu.Lock()
	r.counts[key]++
	fail := r.fail[key] > 0
	if fail {
		r.fail[key]--
	}
	r.mu.Unlock()
	r.calls <- key
	if fail {
		return reconciler.Result{}, errors.New("transient")
	}
	return reconciler.Result{}, nil
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

func TestKeysAreDeduplicatedAndNeverReconciledTwiceAtOnce(t *testing.T) {
	var (
		mu      sync.Mutex
		count   int
		running bool
		overlap bool
	)
	entered := make(chan struct{}, 10)
	release := make(chan struct{})
	rec := func(ctx context.Context, key string) (reconciler.Result, error) {
		mu.Lock()
		overlap = overlap || running
		running = true
		count++
		mu.Unlock()
		entered <- struct{}{}
		<-release
		mu.Lock()
		running = false
		mu.Unlock()
		return reconciler.Result{}, nil
	}
	c := controller.New("test", rec, func(context.Context) ([]string, error) { return nil, nil }, 4, discard)
	// Enqueued before start: 50 adds of one key are one reconcile.
	for range 50 {
		c.Enqueue("k")
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-entered
	// Adds during a reconcile are remembered as one more, run after it.
	for range 50 {
		c.Enqueue("k")
	}
	release <- struct{}{}
	<-entered
	// Release the second reconcile and any later one. Stop returns once
	// the workers have run every reconcile the queue still owes (a key
	// added during a reconcile is handed out after the queue shuts down),
	// so a third one, had the adds not been merged, has run by then.
	close(release)
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if count != 2 || overlap {
		t.Errorf("%d reconciles (want 2), overlapping: %t (want false)", count, overlap)
	}
}

func TestStopCancelsReconciles(t *testing.T) {
	started := make(chan struct{})
	block := func(ctx context.Context, _ string) (reconciler.Result, error) {
		close(started)
		<-ctx.Done()
		return reconciler.Result{}, ctx.Err()
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

// A reconcile that waits for something returns a RequeueAfter instead of
// holding its worker, and is called again after it.
func TestRequeueAfter(t *testing.T) {
	calls := make(chan time.Time, 10)
	n := 0
	rec := func(ctx context.Context, key string) (reconciler.Result, error) {
		calls <- time.Now()
		if n++; n == 1 {
			return reconciler.Result{RequeueAfter: 50 * time.Millisecond}, nil
		}
		return reconciler.Result{}, nil
	}
	c := controller.New("test", rec, func(context.Context) ([]string, error) { return []string{"k"}, nil }, 1, discard)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	first := <-calls
	select {
	case again := <-calls:
		if d := again.Sub(first); d < 50*time.Millisecond {
			t.Errorf("reconciled again after %s; want at least the 50ms asked for", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not reconciled again after its RequeueAfter")
	}
}
