// Package trcontroller is the cluster mode's driver of the trigger and job
// reconcilers: the same cores as the embedded mode's
// (modules/triggers/reconcile, control.JobReconciler), run by
// controller-runtime (modules/reconciler/crdriver) over Trigger and
// FunctionJob custom resources (modules/triggers/crstore). Three
// controllers:
//
//   - "triggers", in the elected leader: applies triggers with
//     triggersfx.Runners' Local, so that cron and rabbitmq triggers run
//     in the leader alone, with the embedded mode's runners, and their
//     status (phase, counts, next run) is written by the leader alone;
//     and keeps the Ingress of every enabled http trigger that asks for
//     one, in the sless server's namespace (IngressOptions, MakeIngress),
//     holding such a Trigger with Finalizer until its Ingress is deleted;
//   - "trigger-gate", in every replica: keeps the replica's gate of /fn
//     (which functions it serves, to whom) with control.GateApplier, and
//     writes nothing;
//   - "jobs", in the leader: runs a FunctionJob once per run_id.
//
// Triggers are reconciled when their spec changes, when they come or go,
// and when their function comes or goes; jobs when they change and when a
// run ends.
//
// Only the cluster build links this package.
package trcontroller

import (
	"context"
	"log/slog"

	"go.uber.org/fx"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"sless.kube5s.ru/sless/api/v1alpha1"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/reconciler"
	"sless.kube5s.ru/sless/modules/reconciler/crdriver"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/control"
	"sless.kube5s.ru/sless/modules/triggers/crstore"
	"sless.kube5s.ru/sless/modules/triggers/reconcile"
	"sless.kube5s.ru/sless/modules/triggers/triggersfx"
)

// Workers is how many triggers, and jobs, each controller reconciles at
// once.
const Workers = 4

// Module provides the three controllers as members of
// crdriver.ControllersGroup, and what the cluster mode's triggers need
// besides: a triggers.ChangeNotifier that does nothing (the controllers
// watch what the API writes), the functions.Dependents that deletes a
// function's Triggers and FunctionJobs (the leader stops them when it sees
// the deletions), and the triggers.Capabilities of the mode (http triggers
// may ask for an Ingress). It needs the *crstore.Triggers and *crstore.Jobs
// stores, the manager and the IngressOptions.
var Module = fx.Module("triggers-controllers",
	fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "triggers") }),
	fx.Provide(
		crdriver.AsController(NewTriggers),
		crdriver.AsController(NewGate),
		crdriver.AsController(NewJobs),
		func() triggers.ChangeNotifier { return triggers.NotifierFuncs{Triggers: nothing, Jobs: nothing} },
		func(trs *crstore.Triggers, jobs *crstore.Jobs) functions.Dependents {
			return control.NewDependents(trs, jobs, nothing, nothing, nothing)
		},
		func() triggers.Capabilities { return triggers.Capabilities{Ingress: true} },
	),
)

func nothing(triggers.Key) {}

// Params are what the trigger controllers need.
type Params struct {
	fx.In
	Triggers  *crstore.Triggers
	Functions functions.Store
	Log       *slog.Logger
}

// NewTriggers returns the leader's trigger controller, which applies
// triggers with runners.Local and keeps the Ingresses of http triggers, as
// opts say, with mgr's client.
func NewTriggers(p Params, runners *triggersfx.Runners, mgr manager.Manager, opts IngressOptions) *crdriver.Driver[triggers.Key] {
	rec := &withIngress{c: mgr.GetClient(), triggers: p.Triggers, applier: runners.Local, opts: opts,
		next: reconcile.New(p.Triggers, p.Functions, runners.Local)}
	return newTriggerDriver("triggers", p, rec.Reconcile, false)
}

// NewGate returns the trigger controller of every replica, which keeps
// gate, the replica's gate of /fn.
func NewGate(p Params, gate *control.Gate) *crdriver.Driver[triggers.Key] {
	rec := reconcile.New(p.Triggers, p.Functions, control.NewGateApplier(gate))
	return newTriggerDriver("trigger-gate", p, rec.Reconcile, true)
}

func newTriggerDriver(name string, p Params, rec reconciler.Func[triggers.Key], everywhere bool) *crdriver.Driver[triggers.Key] {
	return crdriver.New(crdriver.Options[triggers.Key]{
		Name:       name,
		Reconcile:  rec,
		Workers:    Workers,
		Everywhere: everywhere,
		Watches: []crdriver.Watch[triggers.Key]{
			crdriver.WatchObjects(&v1alpha1.Trigger{}, func(ctx context.Context, t *v1alpha1.Trigger) []triggers.Key {
				return keys(ctx, p.Log, p.Triggers.KeyOf, t.Namespace, t.Name)
			}, crdriver.SpecChanged[*v1alpha1.Trigger]()),
			// Whether a trigger's function exists decides its phase.
			crdriver.WatchObjects(&v1alpha1.Function{}, func(ctx context.Context, fn *v1alpha1.Function) []triggers.Key {
				return functionTriggers(ctx, p, fn)
			}, crdriver.ExistenceChanged[*v1alpha1.Function]()),
		},
	})
}

// functionTriggers returns the keys of fn's triggers.
func functionTriggers(ctx context.Context, p Params, fn *v1alpha1.Function) []triggers.Key {
	k, ok, err := p.Triggers.KeyOf(ctx, fn.Namespace, fn.Name)
	if ok {
		var ts []*triggers.Trigger
		if ts, err = p.Triggers.ByFunction(ctx, k.Namespace, k.Name); err == nil {
			out := make([]triggers.Key, len(ts))
			for i, t := range ts {
				out[i] = t.Key()
			}
			return out
		}
	}
	if err != nil {
		p.Log.ErrorContext(ctx, "finding the triggers of a function failed; they are reconciled at the next resync",
			"namespace", fn.Namespace, "function", fn.Name, "error", err)
	}
	return nil
}

// NewJobs returns the leader's job controller, which runs jobs with
// runners.Jobs.
func NewJobs(jobs *crstore.Jobs, runners *triggersfx.Runners, log *slog.Logger) *crdriver.Driver[triggers.Key] {
	d := crdriver.New(crdriver.Options[triggers.Key]{
		Name:      "jobs",
		Reconcile: runners.Jobs.Reconcile,
		Workers:   Workers,
		Watches: []crdriver.Watch[triggers.Key]{
			crdriver.WatchObjects(&v1alpha1.FunctionJob{}, func(ctx context.Context, j *v1alpha1.FunctionJob) []triggers.Key {
				return keys(ctx, log, jobs.KeyOf, j.Namespace, j.Name)
			}, crdriver.SpecChanged[*v1alpha1.FunctionJob]()),
		},
	})
	// A run that ended looks at its job again: a run_id raised during the
	// run starts the next run then.
	runners.Jobs.Enqueue = d.Enqueue
	return d
}

// keys returns the key of name in Kubernetes namespace k8sNS by keyOf, or
// none.
func keys(ctx context.Context, log *slog.Logger, keyOf func(context.Context, string, string) (triggers.Key, bool, error),
	k8sNS, name string) []triggers.Key {
	k, ok, err := keyOf(ctx, k8sNS, name)
	if err != nil {
		log.ErrorContext(ctx, "mapping an object to its key failed; it is reconciled at the next resync",
			"namespace", k8sNS, "name", name, "error", err)
	}
	if !ok {
		return nil
	}
	return []triggers.Key{k}
}
