// Package controller drives level-based reconcile functions (reconciler.Func)
// from a work queue in the embedded mode, the way controller-runtime drives
// them from watches in the cluster mode: keys are deduplicated, one key is never reconciled by two
// workers at once, failures are retried with backoff, and every key is
// reconciled once after start so that work interrupted by a crash resumes.
package controller

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"

	"sless.kube5s.ru/sless/modules/reconciler"
)

// Controller runs a ReconcileFunc from a work queue.
type Controller[K comparable] struct {
	name      string
	reconcile reconciler.Func[K]
	list      func(ctx context.Context) ([]K, error)
	workers   int
	log       *slog.Logger
	queue     workqueue.TypedRateLimitingInterface[K]

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a stopped controller. list returns every key, for the resync at
// start.
func New[K comparable](name string, reconcile reconciler.Func[K], list func(context.Context) ([]K, error), workers int, log *slog.Logger) *Controller[K] {
	return &Controller[K]{
		name:      name,
		reconcile: reconcile,
		list:      list,
		workers:   workers,
		log:       log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[K](100*time.Millisecond, 5*time.Minute),
			workqueue.TypedRateLimitingQueueConfig[K]{Name: name},
		),
	}
}

// Enqueue asks for key to be reconciled. It never blocks and is safe to call
// before Start and after Stop (then it does nothing).
func (c *Controller[K]) Enqueue(key K) { c.queue.Add(key) }

// Start enqueues every key and starts the workers. It returns at once.
func (c *Controller[K]) Start(ctx context.Context) error {
	keys, err := c.list(ctx)
	if err != nil {
		return fmt.Errorf("%s controller: listing keys: %w", c.name, err)
	}
	for _, k := range keys {
		c.queue.Add(k)
	}
	// Workers outlive the start context; Stop cancels theirs.
	var runCtx context.Context
	runCtx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for range c.workers {
		c.wg.Go(func() { c.work(runCtx) })
	}
	return nil
}

// Stop cancels in-progress reconciles, shuts the queue down and waits for the
// workers until ctx is done.
func (c *Controller[K]) Stop(ctx context.Context) error {
	if c.cancel != nil {
		c.cancel()
	}
	c.queue.ShutDown()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s controller: workers did not stop: %w", c.name, ctx.Err())
	}
}

func (c *Controller[K]) work(ctx context.Context) {
	for {
		key, shutdown := c.queue.Get()
		if shutdown {
			return
		}
		c.process(ctx, key)
	}
}

func (c *Controller[K]) process(ctx context.Context, key K) {
	defer c.queue.Done(key)
	res, err := c.reconcile(ctx, key)
	switch {
	case ctx.Err() != nil:
		// Stopping: the key is reconciled again after the next start.
	case err != nil:
		c.log.Error("reconcile failed; retrying", "controller", c.name, "key", key, "error", err)
		c.queue.AddRateLimited(key)
	case res.RequeueAfter > 0:
		c.queue.Forget(key)
		c.queue.AddAfter(key, res.RequeueAfter)
	default:
		c.queue.Forget(key)
	}
}
