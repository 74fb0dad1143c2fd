// Package functionsfx provides the functions module: the REST API and the
// removal of the artifacts no function uses (Module), and, for app/ to pick
// in the embedded mode, the SQL store (SQLStore) and the reconciler driven by
// a work queue (WorkQueue).
package functionsfx

import (
	"cmp"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"sless.kube5s.ru/sless/internal/controller"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/functions/fnapi"
	"sless.kube5s.ru/sless/modules/functions/fnmetrics"
	"sless.kube5s.ru/sless/modules/functions/fnstore"
	"sless.kube5s.ru/sless/modules/functions/prune"
	"sless.kube5s.ru/sless/modules/functions/reconcile"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/server/httpx"
	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// Config configures the functions module.
type Config struct {
	// UploadLimits bound uploaded zips.
	UploadLimits safezip.Limits
	// UploadDir holds uploads while they are checked.
	UploadDir string
	// Workers is the number of functions reconciled at once; no reconcile
	// waits for a build.
	Workers int
	// ArtifactGrace is how long an artifact no function uses is kept before
	// it is removed, when the builder can remove artifacts; default 1h.
	ArtifactGrace time.Duration
}

// defaultArtifactGrace is the default Config.ArtifactGrace: longer than any
// invocation may run, so instances of replaced code have drained.
const defaultArtifactGrace = time.Hour

// Module is the functions module. It needs a functions.Store and a
// functions.ChangeNotifier (the driver of the reconciler), which app/ picks.
var Module = fx.Module("functions",
	logger,
	fx.Provide(httpx.AsRoutes(newAPI), newPhases),
	fx.Invoke(startPruning),
)

// newPhases returns the collector of the functions' phases, which the
// reconciler's driver of either mode makes it hear, registered on reg.
func newPhases(reg *prometheus.Registry) (*fnmetrics.Phases, error) {
	p := fnmetrics.New()
	return p, reg.Register(p)
}

// SQLStore provides functions.Store with the gorm store and its migrations.
var SQLStore = fx.Module("functions-store",
	fx.Provide(
		fx.Annotate(fnstore.New, fx.As(new(functions.Store))),
		fx.Annotate(fnstore.Migrations, fx.ResultTags(sqldb.MigrationsGroup)),
	),
)

// WorkQueue provides the embedded driver of the reconciler, which is also
// the functions.ChangeNotifier: a work queue of function keys, resynced at
// start.
var WorkQueue = fx.Module("functions-reconciler", logger, fx.Provide(newController))

var logger = fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "functions") })

// Controller is the embedded driver of the function reconciler.
type Controller = controller.Controller[functions.Key]

func newController(lc fx.Lifecycle, c Config, store functions.Store, builder build.Builder, deployer runtime.Deployer,
	suspension functions.Suspension, phases *fnmetrics.Phases, log *slog.Logger) (*Controller, functions.ChangeNotifier) {
	var ctrl *Controller
	// A build that ended enqueues its function, which reads the result.
	rec := reconcile.New(store, builder, deployer, suspension, func(k functions.Key) { ctrl.Enqueue(k) }, log)
	rec.ObservePhases(phases)
	ctrl = controller.New("functions", rec.Reconcile, store.Keys, c.Workers, log)
	lc.Append(fx.Hook{OnStart: ctrl.Start, OnStop: ctrl.Stop})
	return ctrl, functions.NotifierFunc(ctrl.Enqueue)
}

func newAPI(c Config, store functions.Store, runtimes *runtime.Registry, notifier functions.ChangeNotifier,
	dependents functions.Dependents, blobs storage.Blobs, log *slog.Logger) *fnapi.API {
	return fnapi.New(store, runtimes, notifier, dependents, blobs, c.UploadLimits, c.UploadDir, log)
}

// startPruning removes the artifacts no function uses, when the builder can.
func startPruning(lc fx.Lifecycle, c Config, store functions.Store, builder build.Builder, log *slog.Logger) {
	pruner, ok := builder.(build.Pruner)
	if !ok {
		return
	}
	col := prune.New(store, pruner, cmp.Or(c.ArtifactGrace, defaultArtifactGrace), log)
	lc.Append(fx.Hook{OnStart: col.Start, OnStop: col.Stop})
}
