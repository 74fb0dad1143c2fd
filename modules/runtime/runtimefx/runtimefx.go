// Package runtimefx provides the runtime module: the built-in python3.11 and
// nodejs20 providers, the registry of every provider in
// runtime.ProvidersGroup (plugins' included), GET /v1/runtimes, the sandbox
// (also as the builders' runtime.Confiner) and the local executor of the
// embedded mode.
package runtimefx

import (
	"log/slog"

	"go.uber.org/fx"

	"sless.kube5s.ru/sless/internal/httpx"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/local"
	"sless.kube5s.ru/sless/modules/runtime/nodejs"
	"sless.kube5s.ru/sless/modules/runtime/python"
	"sless.kube5s.ru/sless/modules/runtime/rtapi"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
)

// Config configures the runtime module.
type Config struct {
	// Executor configures the local executor; its Sandbox is set from
	// Sandbox.
	Executor local.Config
	// Sandbox configures the sandbox of instances and dependency installs;
	// its zero value is off.
	Sandbox sandbox.Config
}

// Module is the runtime module.
var Module = fx.Module("runtime",
	fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "runtime") }),
	fx.Provide(
		AsProvider(python.New),
		AsProvider(nodejs.New),
		fx.Annotate(runtime.NewRegistry, fx.ParamTags(runtime.ProvidersGroup)),
		httpx.AsRoutes(rtapi.New),
		newSandbox,
		newConfiner,
		newExecutor,
	),
)

// newSandbox probes the sandbox and logs which protections are in force; it
// fails when the sandbox is required and unavailable. A nil sandbox (off) is
// a valid result.
func newSandbox(c Config, log *slog.Logger) (*sandbox.Sandbox, error) {
	sb, reason, err := sandbox.New(c.Sandbox)
	switch {
	case err != nil:
		return nil, err
	case sb == nil:
		log.Warn("instances and builds are not sandboxed: they run as the server's user", "reason", reason)
	default:
		log.Info("instances and builds are sandboxed", "protections", sb.Describe())
	}
	return sb, nil
}

// newConfiner is the sandbox as the builders' runtime.Confiner: nil when it
// is off (a nil *Sandbox in the interface would not be nil).
func newConfiner(sb *sandbox.Sandbox) runtime.Confiner {
	if sb == nil {
		return nil
	}
	return sb
}

func newExecutor(lc fx.Lifecycle, c Config, reg *runtime.Registry, sb *sandbox.Sandbox, log *slog.Logger) runtime.Executor {
	c.Executor.Sandbox = sb
	e := local.New(c.Executor, reg, log)
	lc.Append(fx.Hook{OnStart: e.Start, OnStop: e.Stop})
	return e
}

// AsProvider annotates a constructor of a runtime.Provider implementation so
// that fx.Provide adds its result to the registry. A runtime plugin is:
//
//	var Module = fx.Module("myruntime", fx.Provide(runtimefx.AsProvider(New)))
func AsProvider(ctor any) any {
	return fx.Annotate(ctor, fx.As(new(runtime.Provider)), fx.ResultTags(runtime.ProvidersGroup))
}
