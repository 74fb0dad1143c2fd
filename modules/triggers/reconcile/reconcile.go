// Package reconcile is the part of the trigger reconciler that both modes
// share: it reads a trigger, decides its desired state (its phase, what it
// opens on /fn, whether its runner runs it) and hands that to an Applier,
// which applies it where triggers run: in this process (control.Local) or,
// in the cluster mode, through Kubernetes objects.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/reconciler"
	"sless.kube5s.ru/sless/modules/triggers"
)

// MissingFunctionRetry is how often a trigger whose function does not
// exist looks again.
const MissingFunctionRetry = 10 * time.Second

// Exposure is what a trigger opens on /fn: its function, to anyone or to
// token holders only. The zero Exposure opens nothing.
type Exposure struct {
	Function      functions.Key
	TokenRequired bool
}

// Desired is a trigger's desired state.
type Desired struct {
	// Phase and Message are the status the trigger gets, unless applying
	// it fails.
	Phase, Message string
	// Exposure is what the trigger opens on /fn: something for an active
	// http trigger only.
	Exposure Exposure
	// Run tells whether the runner of the trigger's type runs it (an active
	// cron or rabbitmq trigger); a trigger that does not run is removed from
	// every runner.
	Run bool
	// RequeueAfter, when positive, asks for another look after it.
	RequeueAfter time.Duration
}

// Desire returns the desired state of t. functionExists tells whether t's
// function exists; it matters only when t is enabled.
func Desire(t *triggers.Trigger, functionExists bool) Desired {
	switch {
	case !t.IsEnabled():
		return Desired{Phase: triggers.PhaseDisabled}
	case !functionExists:
		return Desired{Phase: triggers.PhaseError, RequeueAfter: MissingFunctionRetry,
			Message: fmt.Sprintf("function %q does not exist in namespace %q", t.Function, t.Namespace)}
	case t.Type == triggers.TypeHTTP:
		return Desired{Phase: triggers.PhaseActive, Exposure: ExposureOf(t)}
	default:
		return Desired{Phase: triggers.PhaseActive, Run: true}
	}
}

// ExposureOf returns what the http trigger t opens while it is active.
func ExposureOf(t *triggers.Trigger) Exposure {
	return Exposure{Function: FunctionOf(t), TokenRequired: t.Auth == triggers.AuthToken}
}

// FunctionOf returns the key of the function t invokes.
func FunctionOf(t *triggers.Trigger) functions.Key {
	return functions.Key{Namespace: t.Namespace, Name: t.Function}
}

// Applier applies triggers' desired state where they run. Implementations
// are safe for concurrent use; the Reconciler never applies one trigger
// from two goroutines at once.
type Applier interface {
	// Apply makes t run and be exposed as d says, and records in t's
	// status d's phase, or the Error phase when t cannot run as d says (its
	// runner refuses its spec). It is idempotent and returns quickly.
	Apply(ctx context.Context, t *triggers.Trigger, d Desired) error
	// Remove stops a trigger that is gone: nothing of it runs or stays
	// exposed. It is idempotent.
	Remove(key triggers.Key)
}

// Reconciler brings triggers to their desired state through an Applier.
type Reconciler struct {
	store     triggers.Store
	functions functions.Store
	applier   Applier
}

// New returns the reconciler of store's triggers, whose functions are in
// fns.
func New(store triggers.Store, fns functions.Store, applier Applier) *Reconciler {
	return &Reconciler{store: store, functions: fns, applier: applier}
}

// Reconcile is a reconciler.Func.
func (r *Reconciler) Reconcile(ctx context.Context, key triggers.Key) (reconciler.Result, error) {
	t, err := r.store.Get(ctx, key)
	if errors.Is(err, triggers.ErrNotFound) {
		r.applier.Remove(key)
		return reconciler.Result{}, nil
	}
	if err != nil {
		return reconciler.Result{}, err
	}
	exists := true
	if t.IsEnabled() {
		_, err := r.functions.Get(ctx, FunctionOf(t))
		if errors.Is(err, functions.ErrNotFound) {
			exists = false
		} else if err != nil {
			return reconciler.Result{}, err
		}
	}
	d := Desire(t, exists)
	return reconciler.Result{RequeueAfter: d.RequeueAfter}, r.applier.Apply(ctx, t, d)
}

// Suspension implements functions.Suspension from the stored triggers: a
// function is suspended when it has http triggers and none is enabled.
type Suspension struct {
	store triggers.Store
}

// NewSuspension returns the suspension of store's triggers.
func NewSuspension(store triggers.Store) *Suspension { return &Suspension{store: store} }

// Suspended implements functions.Suspension.
func (s *Suspension) Suspended(ctx context.Context, key functions.Key) (bool, error) {
	ts, err := s.store.ByFunction(ctx, key.Namespace, key.Name)
	if err != nil {
		return false, err
	}
	hasHTTP := false
	for _, t := range ts {
		if t.Type == triggers.TypeHTTP {
			if t.IsEnabled() {
				return false, nil
			}
			hasHTTP = true
		}
	}
	return hasHTTP, nil
}
