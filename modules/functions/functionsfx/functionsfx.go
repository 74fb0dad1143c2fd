// Package functionsfx provides the functions module of the embedded mode: the
// store, the REST API, the reconciler driven by a work queue, and the removal
// of the artifacts no function uses.
package functionsfx

import (
	"cmp"
	"log/slog"
	"time"

	"go.uber.org/fx"
	"gorm.io/gorm"

	"sless.kube5s.ru/sless/internal/controller"
	"sless.kube5s.ru/sless/internal/httpx"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/functions/fnapi"
	"sless.kube5s.ru/sless/modules/functions/fnstore"
	"sless.kube5s.ru/sless/modules/functions/prune"
	"sless.kube5s.ru/sless/modules/functions/reconcile"
	"sless.kube5s.ru/sless/modules/runtime"
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

// Module is the functions module.
var Module = fx.Module("functions",
	fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "functions") }),
	fx.Provide(
		fx.Annotate(newStore, fx.As(new(functions.Store))),
		fx.Annotate(fnstore.Migrations, fx.ResultTags(sqldb.MigrationsGroup)),
		newController,
		httpx.AsRoutes(newAPI),
	),
	fx.Invoke(startPruning),
)

func newStore(db *gorm.DB) *fnstore.Store { return fnstore.New(db) }

// Controller is the embedded driver of the function reconciler.
type Controller = controller.Controller[functions.Key]

func newController(lc fx.Lifecycle, c Config, store functions.Store, builder build.Builder, deployer runtime.Deployer,
	suspension functions.Suspension, log *slog.Logger) (*Controller, functions.ChangeNotifier) {
	var ctrl *Controller
	// A build that ended enqueues its function, which reads the result.
	rec := reconcile.New(store, builder, deployer, suspension, func(k functions.Key) { ctrl.Enqueue(k) }, log)
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
