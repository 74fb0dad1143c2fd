package periodic

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunsNowThenEveryIntervalUntilStopped(t *testing.T) {
	var runs atomic.Int32
	started := make(chan struct{}, 10)
	ctx, cancel := context.WithCancel(context.Background())
	l := Start(ctx, 20*time.Millisecond, func(ctx context.Context) {
		runs.Add(1)
		started <- struct{}{}
	})
	cancel() // the start context ending does not stop the loop
	for range 3 {
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d runs after 5s", runs.Load())
		}
	}
	l.Stop()
	n := runs.Load()
	time.Sleep(60 * time.Millisecond)
	if runs.Load() != n {
		t.Errorf("ran %d times after Stop", runs.Load()-n)
	}
}

func TestStopCancelsTheRunningTask(t *testing.T) {
	running := make(chan struct{})
	l := Start(context.Background(), time.Hour, func(ctx context.Context) {
		close(running)
		<-ctx.Done()
	})
	<-running
	done := make(chan struct{})
	go func() { l.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not cancel the running task")
	}
}
