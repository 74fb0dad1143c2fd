// Package runtimefx provides the runtime module: the built-in python3.11 and
// nodejs20 providers, the registry of every provider in
// runtime.ProvidersGroup (plugins' included), GET /v1/runtimes and the
// metrics of the executor's instances (rtmetrics). The
// executors (runtime.Deployer and runtime.Instances) are implementations
// that app/ picks: the local one of the embedded mode is in runtime/local.
package runtimefx

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/nodejs"
	"sless.kube5s.ru/sless/modules/runtime/python"
	"sless.kube5s.ru/sless/modules/runtime/rtapi"
	"sless.kube5s.ru/sless/modules/runtime/rtmetrics"
	"sless.kube5s.ru/sless/modules/server/httpx"
)

// Module is the runtime module.
var Module = fx.Module("runtime",
	fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "runtime") }),
	fx.Provide(
		AsProvider(python.New),
		AsProvider(nodejs.New),
		fx.Annotate(runtime.NewRegistry, fx.ParamTags(runtime.ProvidersGroup)),
		httpx.AsRoutes(rtapi.New),
	),
	fx.Invoke(registerMetrics),
)

// metricsParams are optional: a graph without an executor or a registry
// (a test of the module alone) has no instance metrics.
type metricsParams struct {
	fx.In
	Registry  *prometheus.Registry `optional:"true"`
	Instances runtime.Instances    `optional:"true"`
}

// registerMetrics adds the series of the executor's instances to /metrics
// when its data plane reports them (runtime.StatsReporter), whichever
// executor app/ picked.
func registerMetrics(p metricsParams) error {
	if r, ok := p.Instances.(runtime.StatsReporter); ok && p.Registry != nil {
		return p.Registry.Register(rtmetrics.New(r))
	}
	return nil
}

// AsProvider annotates a constructor of a runtime.Provider implementation so
// that fx.Provide adds its result to the registry. A runtime plugin is:
//
//	var Module = fx.Module("myruntime", fx.Provide(runtimefx.AsProvider(New)))
func AsProvider(ctor any) any {
	return fx.Annotate(ctor, fx.As(new(runtime.Provider)), fx.ResultTags(runtime.ProvidersGroup))
}
