package app

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"go.uber.org/fx"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/crane"
	buildlocal "sless.kube5s.ru/sless/modules/build/local"
	"sless.kube5s.ru/sless/modules/functions/functionsfx"
	"sless.kube5s.ru/sless/modules/invoke/invokefx"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/local"
	"sless.kube5s.ru/sless/modules/runtime/nodejs"
	"sless.kube5s.ru/sless/modules/runtime/python"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/triggers/triggersfx"
)

// mode is where a server keeps the desired state and how it drives the
// reconcilers.
type mode string

const (
	// embedded: rows in the database, the work-queue driver, local builds
	// and instances.
	embedded mode = "embedded"
	// cluster: custom resources, controller-runtime, image builds,
	// Deployments (--mode kubernetes); the cluster build only
	// (cluster.go).
	cluster mode = "cluster"
)

// modeOf returns the mode c asks for.
func modeOf(c Config) mode {
	if c.Mode == "kubernetes" {
		return cluster
	}
	return embedded
}

// choices names the implementation of each contract that a server is made
// of. Every contract is picked in one switch below, from these names; no
// module constructs an implementation of its own.
type choices struct {
	mode mode
	// builder is "local" or, in the cluster mode, "crane" or "kaniko".
	builder string
	// executor is "local" or, in the cluster mode, "kube".
	executor string
}

// choose returns the implementations of m, with builder when it is set
// (Config.Builder). The blob store and the authenticator follow the
// configuration alone (newBlobs, authOptions).
func choose(m mode, builder string) choices {
	ch := choices{mode: embedded, builder: "local", executor: "local"}
	if m == cluster {
		// crane is the fast path; kaniko builds what it cannot.
		ch = choices{mode: cluster, builder: "crane", executor: "kube"}
	}
	if builder != "" {
		ch.builder = builder
	}
	return ch
}

// implementations returns the options that provide ch's implementations.
func implementations(c Config, token string, ch choices) fx.Option {
	return fx.Options(
		modeOptions(c, ch.mode),
		builderOptions(c, ch),
		executorOptions(c, ch.executor),
		fx.Provide(func(lc fx.Lifecycle) (storage.Blobs, error) { return newBlobs(lc, c) }),
		authOptions(c, token),
	)
}

// modeOptions provide the stores of desired state (functions, triggers,
// jobs), the drivers of their reconcilers (which are the ChangeNotifiers,
// and, for triggers, the functions.Dependents) and the invocation ledger.
func modeOptions(c Config, m mode) fx.Option {
	switch m {
	case embedded:
		return fx.Options(functionsfx.SQLStore, functionsfx.WorkQueue, triggersfx.SQLStore, triggersfx.WorkQueue,
			invokefx.SQLLedger)
	case cluster:
		// Invocations go to PostgreSQL through the same ledger.
		return fx.Options(invokefx.SQLLedger, clusterOptions(c))
	}
	return fx.Error(fmt.Errorf("unknown mode %q", m))
}

// builderOptions provide the build.Builder.
func builderOptions(c Config, ch choices) fx.Option {
	if ch.mode == embedded && ch.builder != "local" {
		return fx.Error(fmt.Errorf("builder %s makes images, which the embedded mode's local executor cannot run: "+
			"the embedded mode builds with local (to build an image of a function here, run `sless image build`)", ch.builder))
	}
	switch ch.builder {
	case "local":
		return fx.Module("build",
			fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "build") }),
			fx.Provide(func(lc fx.Lifecycle, blobs storage.Blobs, runtimes *runtime.Registry, confine runtime.Confiner,
				obs build.Observer, log *slog.Logger) (build.Builder, error) {
				b, err := buildlocal.New(buildlocal.Config{Dir: artifactDir(c), Limits: c.BuildLimits, Timeout: c.BuildTimeout},
					blobs, runtimes, confine, log)
				if err != nil {
					return nil, err
				}
				b.SetObserver(obs)
				lc.Append(fx.Hook{OnStart: b.Start, OnStop: b.Stop})
				return b, nil
			}),
		)
	case "crane":
		return fx.Module("build",
			fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "build") }),
			fx.Provide(func(lc fx.Lifecycle, blobs storage.Blobs, runtimes *runtime.Registry, obs build.Observer,
				log *slog.Logger) (build.Builder, error) {
				b, err := crane.New(craneConfig(c), blobs, runtimes, log)
				if err != nil {
					return nil, err
				}
				b.SetObserver(obs)
				lc.Append(fx.Hook{OnStart: b.Start, OnStop: b.Stop})
				return b, nil
			}),
		)
	case "kaniko":
		return kanikoBuilder(c)
	}
	return fx.Error(fmt.Errorf("unknown builder %q", ch.builder))
}

// craneConfig is the crane builder's part of c, which validate checked.
func craneConfig(c Config) crane.Config {
	bases, _ := parseBaseImages(c.ImageBaseImages)
	return crane.Config{Repository: c.ImageRepository, BaseImages: bases, Insecure: c.ImageInsecure,
		DockerConfig: c.ImageDockerConfig, Platform: c.ImagePlatform, CacheDir: filepath.Join(c.DataDir, "image-cache"),
		Limits: c.BuildLimits, Timeout: c.BuildTimeout}
}

// executorOptions provide both sides of the executor (runtime.Deployer and
// runtime.Instances) and the runtime.Confiner of dependency installs.
func executorOptions(c Config, name string) fx.Option {
	switch name {
	case "local":
		return fx.Module("executor",
			fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "runtime") }),
			fx.Provide(
				func(lc fx.Lifecycle, log *slog.Logger) (*sandbox.Sandbox, egress, error) {
					return newSandbox(lc, sandboxConfig(c), runtime.Egress(c.InstanceEgress), log)
				},
				newConfiner,
				func(lc fx.Lifecycle, reg *runtime.Registry, sb *sandbox.Sandbox, eg egress, log *slog.Logger) *local.Executor {
					e := local.New(local.Config{IdleTimeout: c.IdleTimeout, Spares: c.Prestart, QueueDepth: c.QueueDepth,
						Pids: c.InstancePids, Sandbox: sb, Egress: eg.filter, EgressUnavailable: eg.unavailable,
						PublicEgress: runtime.Egress(c.InstanceEgress) == runtime.EgressPublic, Zygotes: c.Zygote == "auto"}, reg, log)
					lc.Append(fx.Hook{OnStart: e.Start, OnStop: e.Stop})
					return e
				},
				func(e *local.Executor) runtime.Deployer { return e },
				func(e *local.Executor) runtime.Instances { return e },
			),
		)
	case "kube":
		return kubeExecutor(c)
	}
	return fx.Error(fmt.Errorf("unknown executor %q", name))
}

// newSandbox probes the sandbox and loads the egress filter, and logs which
// protections are in force; it fails when the sandbox is required, or public
// egress for every instance (least is public), and unavailable. A nil
// sandbox (off) is a valid result.
func newSandbox(lc fx.Lifecycle, c sandbox.Config, least runtime.Egress, log *slog.Logger) (*sandbox.Sandbox, egress, error) {
	sb, reason, err := sandbox.New(c)
	if err != nil {
		return nil, egress{}, err
	}
	eg := newEgress(sb)
	if eg.filter != nil {
		lc.Append(fx.StopHook(eg.filter.Close))
	}
	public := least == runtime.EgressPublic
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

// newConfiner is the sandbox as the builder's runtime.Confiner: nil when it
// is off (a nil *Sandbox in the interface would not be nil).
func newConfiner(sb *sandbox.Sandbox) runtime.Confiner {
	if sb == nil {
		return nil
	}
	return sb
}

// NewImageBuilder returns a crane builder of the built-in runtimes for a
// command that builds one image and exits (`sless image build`), with code
// from blobs.
func NewImageBuilder(c crane.Config, blobs crane.Blobs, log *slog.Logger) (*crane.Builder, error) {
	runtimes, err := runtime.NewRegistry([]runtime.Provider{python.New(), nodejs.New()})
	if err != nil {
		return nil, err
	}
	return crane.New(c, blobs, runtimes, log)
}
