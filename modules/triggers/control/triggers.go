package control

import (
	"context"
	"log/slog"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/reconcile"
)

// Local implements reconcile.Applier in this process: http triggers open
// the gate of /fn, cron and rabbitmq triggers run in their Runner, and the
// status keeper records the phase.
type Local struct {
	store   triggers.Store
	runners map[string]triggers.Runner
	gate    *Gate
	keeper  *StatusKeeper
	// notifier tells the functions reconciler that a function's exposure
	// changed (a function whose http triggers are all disabled is scaled to
	// zero).
	notifier functions.ChangeNotifier
	log      *slog.Logger
}

var _ reconcile.Applier = (*Local)(nil)

// NewLocal returns the applier; runners maps trigger types to their
// runner.
func NewLocal(store triggers.Store, runners map[string]triggers.Runner, gate *Gate, keeper *StatusKeeper,
	notifier functions.ChangeNotifier, log *slog.Logger) *Local {
	return &Local{store: store, runners: runners, gate: gate, keeper: keeper, notifier: notifier, log: log}
}

// LoadGate opens the gate for the enabled http triggers as stored, before
// the server takes requests, so that /fn does not answer 404 for them until
// the first reconcile.
func (l *Local) LoadGate(ctx context.Context) error {
	all, err := l.store.All(ctx)
	if err != nil {
		return err
	}
	for _, t := range all {
		if t.Type == triggers.TypeHTTP && t.IsEnabled() {
			l.gate.set(t.Key(), reconcile.ExposureOf(t))
		}
	}
	return nil
}

// Apply implements reconcile.Applier.
func (l *Local) Apply(ctx context.Context, t *triggers.Trigger, d reconcile.Desired) error {
	// Runners report events from Apply on.
	l.keeper.track(t)
	l.expose(t.Key(), d.Exposure)
	phase, msg := d.Phase, d.Message
	for typ, runner := range l.runners {
		if typ != t.Type || !d.Run {
			runner.Remove(t.Key())
			continue
		}
		if err := runner.Apply(ctx, t); err != nil {
			phase, msg = triggers.PhaseError, err.Error()
		}
	}
	return l.keeper.setPhase(ctx, t, phase, msg)
}

// Remove implements reconcile.Applier: it stops a deleted trigger's
// runner, its place in the gate and its status.
func (l *Local) Remove(key triggers.Key) {
	for _, runner := range l.runners {
		runner.Remove(key)
	}
	l.expose(key, reconcile.Exposure{})
	l.keeper.forget(key)
}

// expose sets what the trigger opens on /fn and tells the functions
// reconciler about every function whose exposure changed.
func (l *Local) expose(key triggers.Key, e reconcile.Exposure) {
	for _, fn := range l.gate.set(key, e) {
		l.notifier.Changed(fn)
	}
}
