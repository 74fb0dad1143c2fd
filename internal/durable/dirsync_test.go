package durable

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Calls that arrive while an fsync runs share the next one, and each
// returns only once an fsync that started after it was called has ended.
func TestDirSyncerSharesTheNextFsync(t *testing.T) {
	var fsyncs atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	failed := errors.New("fsync failed")
	d := &DirSyncer{fsync: func() error {
		n := fsyncs.Add(1)
		started <- struct{}{}
		<-release
		if n == 2 {
			return failed
		}
		return nil
	}}

	first := make(chan error, 1)
	go func() { first <- d.Sync() }()
	<-started // the first fsync runs; the calls below start after it

	const waiters = 8
	var ended atomic.Int32
	errs := make(chan error, waiters)
	var wg sync.WaitGroup
	for range waiters {
		wg.Go(func() {
			err := d.Sync()
			ended.Add(1)
			errs <- err
		})
	}
	time.Sleep(50 * time.Millisecond) // let them all wait
	release <- struct{}{}             // the first fsync ends
	if err := <-first; err != nil {
		t.Fatalf("first Sync: %v", err)
	}
	<-started // the shared second fsync runs
	if n := ended.Load(); n != 0 {
		t.Fatalf("%d calls returned before the fsync that started after them ended", n)
	}
	release <- struct{}{}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, failed) {
			t.Errorf("a call that shared the failed fsync returned %v; want its error", err)
		}
	}
	if n := fsyncs.Load(); n != 2 {
		t.Errorf("%d fsyncs for 1 + %d calls; want 2", n, waiters)
	}

	// Alone, a call runs its own fsync.
	go func() { <-started; release <- struct{}{} }()
	if err := d.Sync(); err != nil || fsyncs.Load() != 3 {
		t.Errorf("a lone Sync: %v after %d fsyncs; want nil after 3", err, fsyncs.Load())
	}
}
