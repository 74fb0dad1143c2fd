// Package triggersfx provides the triggers module: what both modes share
// (Module: the REST API of triggers and FunctionJobs, the trigger types and
// their validation, the gate of /fn, the suspension of functions) and, for
// app/ to pick in the embedded mode, the SQL stores (SQLStore) and the
// trigger and job reconcilers driven by work queues in this process
// (WorkQueue).
package triggersfx

import (
	"context"
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"sless.kube5s.ru/sless/internal/controller"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/server/httpx"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/control"
	"sless.kube5s.ru/sless/modules/triggers/cron"
	"sless.kube5s.ru/sless/modules/triggers/rabbitmq"
	"sless.kube5s.ru/sless/modules/triggers/reconcile"
	"sless.kube5s.ru/sless/modules/triggers/trapi"
	"sless.kube5s.ru/sless/modules/triggers/trstore"
)

// Config configures the triggers module.
type Config struct {
	// Workers is the number of triggers, and of jobs, reconciled at once
	// (WorkQueue).
	Workers int
}

// Module is the triggers module. It needs a triggers.Store, a
// triggers.JobStore and a triggers.ChangeNotifier (the driver of the
// reconcilers), which app/ picks, and takes the mode's
// triggers.Capabilities when it provides them (none: the embedded mode's).
var Module = fx.Module("triggers",
	logger,
	fx.Provide(
		asType(func() cron.Type { return cron.Type{} }),
		asType(func() rabbitmq.Type { return rabbitmq.Type{} }),
		// The kubernetes mode provides its triggers.Capabilities; the
		// embedded mode has none, the zero value.
		fx.Annotate(triggers.NewTypes, fx.ParamTags(triggers.TypesGroup, `optional:"true"`)),
		control.NewGate,
		func(g *control.Gate) invoke.Exposure { return g },
		newRunners,
		func(s triggers.Store) functions.Suspension { return reconcile.NewSuspension(s) },
		httpx.AsRoutes(trapi.New),
	),
)

// SQLStore provides triggers.Store and triggers.JobStore with the gorm
// stores and their migrations.
var SQLStore = fx.Module("triggers-store",
	fx.Provide(
		fx.Annotate(trstore.Migrations, fx.ResultTags(sqldb.MigrationsGroup)),
		fx.Annotate(trstore.NewTriggers, fx.As(new(triggers.Store))),
		fx.Annotate(trstore.NewJobs, fx.As(new(triggers.JobStore))),
	),
)

// WorkQueue provides the embedded driver of the trigger and job
// reconcilers: work queues of their keys, resynced at start, and the
// in-process applier of triggers (control.Local: the gate, the cron and
// rabbitmq runners, the status keeper). It is the triggers.ChangeNotifier,
// and the functions.Dependents, which stops a deleted function's triggers
// in this process before the API answers.
var WorkQueue = fx.Module("triggers-reconcilers",
	logger,
	fx.Provide(
		newControllers,
		func(c *controllers) functions.Dependents { return c.dependents },
		func(c *controllers) triggers.ChangeNotifier {
			return triggers.NotifierFuncs{Triggers: c.triggers.Enqueue, Jobs: c.jobs.Enqueue}
		},
	),
	fx.Invoke(func(*controllers) {}),
)

var logger = fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "triggers") })

// controllers drive the module's reconcilers in the embedded mode.
type controllers struct {
	triggers, jobs *controller.Controller[triggers.Key]
	dependents     *control.Dependents
}

// Runners run triggers and jobs in this process, whichever driver
// reconciles them (the work queues of WorkQueue, or controller-runtime in
// the cluster mode's leader): Local applies triggers (the gate of /fn, the
// cron and rabbitmq runners, the keeper of their status) and Jobs runs
// jobs. Their lifecycle hooks start before the driver's and stop after it:
// the runs in flight finish, then the statuses they changed are written.
type Runners struct {
	Local *control.Local
	// Jobs is the job reconciler; its driver sets its Enqueue.
	Jobs *control.JobReconciler
}

type runnerParams struct {
	fx.In
	LC        fx.Lifecycle
	Triggers  triggers.Store
	Jobs      triggers.JobStore
	Notifier  functions.ChangeNotifier
	Invoker   invoke.Invoker
	Ledger    invoke.Ledger
	Instances runtime.Instances
	Gate      *control.Gate
	Registry  *prometheus.Registry
	Log       *slog.Logger
}

func newRunners(p runnerParams) (*Runners, error) {
	keeper := control.NewStatusKeeper(p.Triggers, p.Log)
	if err := p.Registry.Register(keeper); err != nil {
		return nil, err
	}
	cronRunner := cron.New(p.Invoker, p.Instances, keeper, p.Log)
	rabbitRunner := rabbitmq.New(p.Invoker, keeper, p.Log)
	runners := map[string]triggers.Runner{triggers.TypeCron: cronRunner, triggers.TypeRabbitMQ: rabbitRunner}
	r := &Runners{
		Local: control.NewLocal(p.Triggers, runners, p.Gate, keeper, p.Notifier, p.Log),
		Jobs:  control.NewJobReconciler(p.Jobs, p.Invoker, p.Ledger, p.Log),
	}
	p.LC.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			return errors.Join(keeper.Start(ctx), r.Local.LoadGate(ctx), r.Jobs.Start(ctx))
		},
		OnStop: func(ctx context.Context) error {
			return errors.Join(cronRunner.Stop(ctx), rabbitRunner.Stop(ctx), r.Jobs.Stop(ctx), keeper.Stop(ctx))
		},
	})
	return r, nil
}

type params struct {
	fx.In
	LC        fx.Lifecycle
	Config    Config
	Triggers  triggers.Store
	Jobs      triggers.JobStore
	Functions functions.Store
	Runners   *Runners
	Log       *slog.Logger
}

func newControllers(p params) *controllers {
	trRec := reconcile.New(p.Triggers, p.Functions, p.Runners.Local)
	jobRec := p.Runners.Jobs
	c := &controllers{
		triggers: controller.New("triggers", trRec.Reconcile, p.Triggers.Keys, p.Config.Workers, p.Log),
		jobs:     controller.New("jobs", jobRec.Reconcile, p.Jobs.Keys, p.Config.Workers, p.Log),
	}
	jobRec.Enqueue = c.jobs.Enqueue
	c.dependents = control.NewDependents(p.Triggers, p.Jobs, p.Runners.Local.Remove, c.triggers.Enqueue, c.jobs.Enqueue)
	// Stop taking work before the runners stop (their hook runs after
	// this one on stop).
	p.LC.Append(fx.Hook{
		OnStart: func(ctx context.Context) error { return errors.Join(c.triggers.Start(ctx), c.jobs.Start(ctx)) },
		OnStop:  func(ctx context.Context) error { return errors.Join(c.triggers.Stop(ctx), c.jobs.Stop(ctx)) },
	})
	return c
}

// asType adds the trigger type that ctor returns to triggers.TypesGroup.
func asType(ctor any) any {
	return fx.Annotate(ctor, fx.As(new(triggers.Type)), fx.ResultTags(triggers.TypesGroup))
}
