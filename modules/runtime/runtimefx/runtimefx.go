// Package runtimefx provides the runtime module: the built-in python3.11 and
// nodejs20 providers, the registry of every provider in
// runtime.ProvidersGroup (plugins' included), GET /v1/runtimes, the sandbox
// (also as the builders' runtime.Confiner) and the local executor of the
// embedded mode.
package runtimefx

import (
	"errors"
	"fmt"
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
	// Executor configures the local executor; its Sandbox and egress
	// settings are set from Sandbox and Egress.
	Executor local.Config
	// Sandbox configures the sandbox of instances and dependency installs;
	// its zero value is off.
	Sandbox sandbox.Config
	// Egress is the least restricted egress of every instance: public
	// applies to every function and requires the egress filter at start;
	// default (empty) all, where each function has its own.
	Egress runtime.Egress
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
		func(e *local.Executor) runtime.Deployer { return e },
		func(e *local.Executor) runtime.Instances { return e },
	),
)

// newSandbox probes the sandbox and loads the egress filter, and logs which
// protections are in force; it fails when the sandbox is required, or public
// egress for every instance, and unavailable. A nil sandbox (off) is a valid
// result.
func newSandbox(lc fx.Lifecycle, c Config, log *slog.Logger) (*sandbox.Sandbox, egress, error) {
	sb, reason, err := sandbox.New(c.Sandbox)
	if err != nil {
		return nil, egress{}, err
	}
	eg := newEgress(sb)
	if eg.filter != nil {
		lc.Append(fx.StopHook(eg.filter.Close))
	}
	public := c.Egress == runtime.EgressPublic
	var desc string
	switch {
	case public && eg.filter == nil:
		return nil, egress{}, fmt.Errorf("public egress for every instance is required but unavailable: %s", eg.unavailable)
	case public:
		desc = "public for every function: " + eg.filter.Describe()
	case eg.filter == nil:
		desc = "all (public egress is unavailable: " + eg.unavailable + ")"
	default:
		desc = "all, or public where a function asks: " + eg.filter.Describe()
	}
	attrs := []any{"egress", desc}
	if eg.cause != nil {
		attrs = append(attrs, "egress_error", eg.cause)
	}
	if sb == nil {
		log.Warn("instances and builds are not sandboxed: they run as the server's user", append([]any{"reason", reason}, attrs...)...)
	} else {
		log.Info("instances and builds are sandboxed", append([]any{"protections", sb.Describe()}, attrs...)...)
	}
	return sb, eg, nil
}

// egress is the filter of public egress, or why there is none: unavailable
// in the users' terms (it reaches the status of functions that ask for
// public egress), cause for the log.
type egress struct {
	filter      *sandbox.EgressFilter
	unavailable string
	cause       error
}

// newEgress loads the egress filter for the instances of sb, with the name
// servers of /etc/resolv.conf. An unconfined instance gets none: it could
// remove it.
func newEgress(sb *sandbox.Sandbox) egress {
	if sb == nil {
		return egress{unavailable: "instances are not sandboxed, and could remove the filter"}
	}
	policy, err := sandbox.HostEgressPolicy("/etc/resolv.conf")
	if err != nil {
		return egress{unavailable: "the host's addresses and name servers could not be read", cause: err}
	}
	f, err := sandbox.NewEgressFilter(policy)
	switch {
	case errors.Is(err, sandbox.ErrEgressNeedsRoot):
		return egress{unavailable: err.Error()}
	case err != nil:
		return egress{unavailable: "the kernel does not run the network filter (cgroup BPF programs)", cause: err}
	}
	return egress{filter: f}
}

// newConfiner is the sandbox as the builders' runtime.Confiner: nil when it
// is off (a nil *Sandbox in the interface would not be nil).
func newConfiner(sb *sandbox.Sandbox) runtime.Confiner {
	if sb == nil {
		return nil
	}
	return sb
}

func newExecutor(lc fx.Lifecycle, c Config, reg *runtime.Registry, sb *sandbox.Sandbox, eg egress, log *slog.Logger) *local.Executor {
	c.Executor.Sandbox = sb
	c.Executor.Egress, c.Executor.EgressUnavailable = eg.filter, eg.unavailable
	c.Executor.PublicEgress = c.Egress == runtime.EgressPublic
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
