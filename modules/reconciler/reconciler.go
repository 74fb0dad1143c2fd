// Package reconciler is the contract between the reconcile core and the
// drivers that run it. The core is one level-based function per kind of
// object (functions, triggers, jobs), written over the modules' contracts;
// the embedded mode drives it from a work queue (internal/controller), the
// cluster mode from controller-runtime, whose reconcile.Result this Result
// maps onto.
package reconciler

import (
	"context"
	"time"
)

// Result tells the driver when to reconcile a key again. A reconcile that
// waits for something slow (a build, a rollout) returns at once with a
// RequeueAfter instead of holding its worker.
type Result struct {
	// RequeueAfter, when positive, reconciles the key again after it.
	RequeueAfter time.Duration
}

// Func brings one key's observed state to its desired state. It is
// level-based: it reads everything it needs and may be called any number of
// times, never twice at once for one key. A returned error is retried with
// backoff; the driver logs it.
type Func[K comparable] func(ctx context.Context, key K) (Result, error)
