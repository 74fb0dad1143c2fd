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
	// The loop is the only caller of the task: once it ended, no run
	// follows.
	select {
	case <-l.done:
	default:
		t.Error("Stop returned while the loop still runs")
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
