// Package app is the composition root: it turns the configuration into the
// modules' own configurations, picks implementations, and wires every module
// with fx. Nothing else wires.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"sless.kube5s.ru/sless/internal/discovery"
	"sless.kube5s.ru/sless/internal/durable"
	"sless.kube5s.ru/sless/internal/heapfloor"
	"sless.kube5s.ru/sless/internal/procs"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/buildmetrics"
	"sless.kube5s.ru/sless/modules/build/buildtrace"
	"sless.kube5s.ru/sless/modules/functions/functionsfx"
	"sless.kube5s.ru/sless/modules/invoke/invokefx"
	"sless.kube5s.ru/sless/modules/invoke/ledger/journal"
	"sless.kube5s.ru/sless/modules/invoke/proxy"
	"sless.kube5s.ru/sless/modules/runtime/runtimefx"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
	"sless.kube5s.ru/sless/modules/server"
	"sless.kube5s.ru/sless/modules/server/httpx"
	"sless.kube5s.ru/sless/modules/server/metricspush"
	"sless.kube5s.ru/sless/modules/storage/storagefx"
	"sless.kube5s.ru/sless/modules/tracing"
	"sless.kube5s.ru/sless/modules/tracing/otlp"
	"sless.kube5s.ru/sless/modules/triggers/triggersfx"
	"sless.kube5s.ru/sless/ui"
)

// StopTimeout bounds a graceful shutdown: draining requests and builds.
const StopTimeout = 30 * time.Second

// Options returns the fx options of the server of c's mode for a validated
// configuration whose API token is known. plugins are added as they are.
func Options(c Config, token string, log *slog.Logger, plugins ...fx.Option) fx.Option {
	return options(modeOf(c), c, token, log, plugins...)
}

// options returns the fx options of a server of mode m: the modules, and
// the implementations of their contracts that m chooses.
func options(m mode, c Config, token string, log *slog.Logger, plugins ...fx.Option) fx.Option {
	return fx.Options(
		fx.WithLogger(func() fxevent.Logger { return newFxLogger(log) }),
		fx.Supply(log, c),
		fx.Provide(newRegistry, newBuildObserver),
		tracingOptions(c),
		metricsPushOptions(c),
		implementations(c, token, choose(m, c.Builder)),
		fx.Supply(
			server.Config{Listen: c.Listen, DataDir: c.DataDir},
			storagefx.Config{DatabaseURL: c.DatabaseURL},
			functionsfx.Config{UploadLimits: c.BuildLimits, UploadDir: filepath.Join(c.DataDir, "tmp"), Workers: 4},
			invokefx.Config{Proxy: proxy.Config{MaxRequestBytes: c.MaxRequestBytes, MaxResultBytes: c.MaxResultBytes}},
			invokefx.LedgerConfig{Retention: c.InvocationRetention,
				Journal: journal.Options{Dir: filepath.Join(c.DataDir, "journal"), SyncInterval: c.JournalSync, MaxBytes: c.JournalMaxBytes}},
			triggersfx.Config{Workers: 4},
		),
		storagefx.Module,
		runtimefx.Module,
		functionsfx.Module,
		invokefx.Module,
		triggersfx.Module,
		fx.Provide(server.New, httpx.AsRoutes(ui.New)),
		fx.Invoke(func(*server.Server) {}),
		fx.Options(plugins...),
	)
}

// sandboxConfig is the sandbox's part of c, which validate checked.
func sandboxConfig(c Config) sandbox.Config {
	first, count, _ := parseUIDRange(c.SandboxUIDs)
	return sandbox.Config{Mode: sandbox.Mode(c.Sandbox), FirstUID: first, UIDs: count, TmpMB: c.InstanceTmpMB}
}

// artifactDir is where builds go.
func artifactDir(c Config) string { return filepath.Join(c.DataDir, "artifacts") }

// tracingOptions provide the tracing.Exporter when spans are exported.
func tracingOptions(c Config) fx.Option {
	if c.TraceOTLPURL == "" {
		return fx.Options()
	}
	return fx.Provide(func(lc fx.Lifecycle, reg *prometheus.Registry, log *slog.Logger) (tracing.Exporter, error) {
		headers, _ := parsePairs(c.TraceOTLPHeaders)
		e, err := otlp.New(otlp.Config{URL: c.TraceOTLPURL, Headers: headers, SampleRatio: c.TraceSampleRatio}, reg, log)
		if err != nil {
			return nil, err
		}
		lc.Append(fx.Hook{OnStart: e.Start, OnStop: e.Stop})
		return e, nil
	})
}

// metricsPushOptions push the metrics when a URL is set. Its invoke comes
// after the modules' and before the HTTP server's, so the pusher stops
// right after the server drained /fn, with one last push.
func metricsPushOptions(c Config) fx.Option {
	if c.MetricsPushURL == "" {
		return fx.Options()
	}
	return fx.Invoke(func(lc fx.Lifecycle, reg *prometheus.Registry, log *slog.Logger) error {
		p, err := metricspush.New(metricspush.Config{URL: c.MetricsPushURL, Interval: c.MetricsPushInterval}, reg, log)
		if err != nil {
			return err
		}
		lc.Append(fx.Hook{OnStart: p.Start, OnStop: p.Stop})
		return nil
	})
}

// buildObserverParams: the exporter is there only when spans are exported.
type buildObserverParams struct {
	fx.In
	Registry *prometheus.Registry
	Tracer   tracing.Exporter `optional:"true"`
}

// newBuildObserver is what every builder tells about its builds: their
// metrics, and their spans when spans are exported.
func newBuildObserver(p buildObserverParams) (build.Observer, error) {
	m, err := buildmetrics.New(p.Registry)
	if err != nil {
		return nil, err
	}
	if p.Tracer == nil {
		return build.Observers{m}, nil
	}
	return build.Observers{m, buildtrace.New(p.Tracer)}, nil
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Prepare creates the data directory, locks it for this process (another
// server holding it is an error that names that server), empties its tmp
// directory (what is there was left by a server killed mid-upload), and
// resolves the API token, logging where a generated one was stored. The
// caller holds the lock until it stops serving.
func Prepare(c Config, log *slog.Logger) (token string, lock *discovery.Lock, err error) {
	// Only the server may read the data: the token, every function's env in
	// the database, the uploaded and built code.
	for _, dir := range []string{c.DataDir, artifactDir(c)} {
		if err := durable.MkdirAll(dir, 0o700); err != nil {
			return "", nil, fmt.Errorf("creating the data directory: %w", err)
		}
	}
	if st, err := os.Stat(c.DataDir); err == nil && st.Mode().Perm()&0o077 != 0 {
		log.Warn("the data directory is open to other users; it holds the API token and every function's env: chmod 700 it",
			"data_dir", c.DataDir, "mode", st.Mode().Perm().String())
	}
	lock, err = discovery.TakeLock(c.DataDir, discovery.Holder{PID: os.Getpid(), Listen: c.Listen})
	if err != nil {
		return "", nil, err
	}
	if lock.Stale != nil {
		log.Warn("the previous server of this data directory did not stop cleanly; cleaned up after it", "pid", lock.Stale.PID)
	}
	tmp := filepath.Join(c.DataDir, "tmp")
	if err := os.RemoveAll(tmp); err == nil {
		err = os.Mkdir(tmp, 0o700)
	}
	if err != nil {
		lock.Unlock()
		return "", nil, fmt.Errorf("emptying the data directory's tmp: %w", err)
	}
	token, path, generated, err := ensureToken(c)
	if err != nil {
		lock.Unlock()
		return "", nil, err
	}
	switch {
	case generated:
		log.Info("generated an API token", "file", path)
	case path != "":
		log.Info("using the API token", "file", path)
	}
	return token, lock, nil
}

// serverCPUs returns how many CPUs the server's own code may use at once
// (GOMAXPROCS), given the server-cpus setting, the GOMAXPROCS environment
// variable and the CPUs available to the process: the setting when positive,
// else what GOMAXPROCS set, else half of the available CPUs, at least one.
//
// The embedded server shares the machine with the instances it runs, and its
// /fn path waits on them: with fewer threads than CPUs it hands requests
// between threads less often, which on a 2-CPU machine cut the latency /fn
// adds by a third and its CPU per request by a quarter (bench/README.md).
// That default gives way to the control plane and to crowds: Run raises
// GOMAXPROCS to every CPU while API writes or many invocations are in
// flight, and lowers it procsSettle after (package procs).
func serverCPUs(setting int, gomaxprocsEnv string, available int) int {
	switch {
	case setting > 0:
		return setting
	case gomaxprocsEnv != "":
		return available
	}
	return max(1, (available+1)/2)
}

// procsSettle is how long the server keeps every CPU after its last API
// write: long enough for the builds and status writes a deploy starts, and
// to resize the scheduler at most about once a second.
const procsSettle = time.Second

// heapFloor is how much the server's heap may grow between two garbage
// collections at least (see heapfloor): under /fn load, Go's default
// collected every 4 MB or so of allocation, which cost 10-18% of the
// server's CPU per request (bench/README.md). GOGC in the environment turns
// it off.
const heapFloor = 32 << 20

// Run runs the server until SIGINT or SIGTERM, then stops it gracefully.
// Before the modules start it waits for the disk, the database and the
// blob store (see waitForDependencies), so that a dependency that is not up
// yet delays the start instead of failing it.
func Run(c Config, log *slog.Logger, plugins ...fx.Option) error {
	token, lock, err := Prepare(c, log)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	available := goruntime.GOMAXPROCS(0)
	if cpus := serverCPUs(c.ServerCPUs, os.Getenv("GOMAXPROCS"), available); cpus != available {
		goruntime.GOMAXPROCS(cpus)
		if c.ServerCPUs == 0 {
			// The default gives way to the control plane's work.
			plugins = append(plugins, fx.Supply(procs.New(cpus, available, procsSettle)))
		}
	}
	if os.Getenv("GOGC") == "" {
		defer heapfloor.Start(heapFloor).Stop()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := waitForDependencies(ctx, c, log); err != nil {
		return err
	}
	application := fx.New(Options(c, token, log, plugins...), fx.StartTimeout(2*time.Minute), fx.StopTimeout(StopTimeout))
	if err := application.Err(); err != nil {
		return err
	}
	startCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := application.Start(startCtx); err != nil {
		return err
	}
	log.Info("sless is running", "mode", c.Mode, "listen", c.Listen, "data_dir", c.DataDir, "server_cpus", goruntime.GOMAXPROCS(0))
	<-ctx.Done()
	log.Info("stopping", "signal", context.Cause(ctx).Error())
	stopCtx, cancelStop := context.WithTimeout(context.Background(), StopTimeout)
	defer cancelStop()
	err = application.Stop(stopCtx)
	if stopCtx.Err() != nil {
		// What did not stop still runs: its stack says what it waits for.
		log.Error("stopping took longer than " + StopTimeout.String() + "; the stacks of all goroutines follow")
		pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
	}
	return err
}
