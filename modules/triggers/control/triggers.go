package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/reconciler"
	"sless.kube5s.ru/sless/modules/triggers"
)

// missingFunctionRetry is how often a trigger whose function does not exist
// looks again.
const missingFunctionRetry = 10 * time.Second

// TriggerReconciler brings triggers to their desired state: http triggers
// open the gate of /fn, cron and rabbitmq triggers run in their Runner.
type TriggerReconciler struct {
	store     triggers.Store
	functions functions.Store
	runners   map[string]triggers.Runner
	gate      *Gate
	keeper    *StatusKeeper
	// notifier tells the functions reconciler that a function's exposure
	// changed (a function whose http triggers are all disabled is scaled to
	// zero).
	notifier functions.ChangeNotifier
	log      *slog.Logger
}

// NewTriggerReconciler returns the reconciler; runners maps trigger types
// to their runner.
func NewTriggerReconciler(store triggers.Store, fns functions.Store, runners map[string]triggers.Runner,
	gate *Gate, keeper *StatusKeeper, notifier functions.ChangeNotifier, log *slog.Logger) *TriggerReconciler {
	return &TriggerReconciler{store: store, functions: fns, runners: runners, gate: gate, keeper: keeper, notifier: notifier, log: log}
}

// LoadGate opens the gate for the enabled http triggers as stored, before
// the server takes requests, so that /fn does not answer 404 for them until
// the first reconcile.
func (r *TriggerReconciler) LoadGate(ctx context.Context) error {
	all, err := r.store.All(ctx)
	if err != nil {
		return err
	}
	for _, t := range all {
		if t.Type == triggers.TypeHTTP && t.IsEnabled() {
			r.gate.set(t.Key(), openingOf(t))
		}
	}
	return nil
}

// Reconcile is a reconciler.Func.
func (r *TriggerReconciler) Reconcile(ctx context.Context, key triggers.Key) (reconciler.Result, error) {
	t, err := r.store.Get(ctx, key)
	if errors.Is(err, triggers.ErrNotFound) {
		r.stop(key)
		return reconciler.Result{}, nil
	}
	if err != nil {
		return reconciler.Result{}, err
	}
	r.keeper.track(t)

	phase, msg := triggers.PhaseActive, ""
	var res reconciler.Result
	if !t.IsEnabled() {
		phase = triggers.PhaseDisabled
	} else if _, err := r.functions.Get(ctx, functionOf(t)); errors.Is(err, functions.ErrNotFound) {
		phase, msg = triggers.PhaseError, fmt.Sprintf("function %q does not exist in namespace %q", t.Function, t.Namespace)
		res.RequeueAfter = missingFunctionRetry
	} else if err != nil {
		return reconciler.Result{}, err
	}
	active := phase == triggers.PhaseActive

	var exposed opening
	if t.Type == triggers.TypeHTTP && active {
		exposed = openingOf(t)
	}
	r.expose(key, exposed)
	for typ, runner := range r.runners {
		if typ != t.Type || !active {
			runner.Remove(key)
			continue
		}
		if err := runner.Apply(ctx, t); err != nil {
			phase, msg = triggers.PhaseError, err.Error()
		}
	}
	return res, r.keeper.setPhase(ctx, t, phase, msg)
}

// stop stops a deleted trigger: its runner, its place in the gate and its
// status. It is idempotent.
func (r *TriggerReconciler) stop(key triggers.Key) {
	for _, runner := range r.runners {
		runner.Remove(key)
	}
	r.expose(key, opening{})
	r.keeper.forget(key)
}

// expose sets what the trigger opens on /fn and tells the functions
// reconciler about every function whose exposure changed.
func (r *TriggerReconciler) expose(key triggers.Key, o opening) {
	for _, fn := range r.gate.set(key, o) {
		r.notifier.Changed(fn)
	}
}

// openingOf returns what the http trigger t opens when it is enabled.
func openingOf(t *triggers.Trigger) opening {
	return opening{function: functionOf(t), token: t.Auth == triggers.AuthToken}
}

// functionOf returns the key of the function t invokes.
func functionOf(t *triggers.Trigger) functions.Key {
	return functions.Key{Namespace: t.Namespace, Name: t.Function}
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
