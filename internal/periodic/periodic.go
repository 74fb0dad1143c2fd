// Package periodic runs a task in the background now and then at a fixed
// interval until it is stopped: the maintenance loops of the modules.
package periodic

import (
	"context"
	"time"
)

// Loop is a running periodic task.
type Loop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs task now and then every interval, one run at a time, and
// returns at once. Each run gets a context that Stop cancels; it keeps ctx's
// values but not its cancellation, since fx cancels its start context once
// the application started.
func Start(ctx context.Context, every time.Duration, task func(ctx context.Context)) *Loop {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l := &Loop{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			task(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return l
}

// Stop cancels the running task's context and waits until it returned; the
// task must return soon once its context is cancelled.
func (l *Loop) Stop() {
	l.cancel()
	<-l.done
}
