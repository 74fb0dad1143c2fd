// Package local is the embedded mode's runtime executor: function instances
// are local processes running the runtime's wrapper, reached over unix
// sockets.
//
// Cold starts are cheap because the interpreter is already running: the
// executor keeps pre-started generic processes (spares) per runtime, and a
// cold start only limits a spare's memory and specializes it (replacing its
// environment, loading the handler). A spare serves exactly one function for
// its whole life, so nothing leaks between functions. Functions whose env sets
// variables the interpreter reads only at start (PYTHONPATH, NODE_OPTIONS) get
// a process started with their env instead.
//
// Memory is limited per instance with a memory cgroup where the server may
// create one, else with RLIMIT_DATA, and processes with a pids cgroup, else,
// for sandboxed instances, RLIMIT_NPROC (see memoryLimiter).
//
// With Config.Sandbox, every process (spares included) runs in a sandbox of
// its own (see package sandbox): a spare is generic until specialize mounts
// its function's artifact read-only on its /code, so that cold starts keep
// skipping the interpreter's start. A rootless sandbox's spare cannot be
// mounted into: its init waits for the code's path, and specialize hands it
// over, which starts the interpreter; a cold start then skips the init's own
// start but not the interpreter's.
//
// With Config.Zygotes and the sandbox's root mode, the instances of a
// runtime that can fork (runtime.Forker) are forked from a zygote of their
// runtime and namespace instead (see forker), which keeps forked spares;
// they share the zygote's memory. Their limits are cgroups they join before
// they run anything, so the executor never names them by pid.
package local

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sless.kube5s.ru/sless/internal/tempdir"
	"sless.kube5s.ru/sless/modules/meta"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
)

// Config configures the executor.
type Config struct {
	// IdleTimeout stops an instance that served nothing for this long, down
	// to the function's MinInstances (scale to zero). Default 5m.
	IdleTimeout time.Duration
	// Spares is the number of pre-started generic processes kept per runtime
	// in use; 0 turns pre-starting off.
	Spares int
	// QueueDepth is the most invocations of one function that wait for
	// capacity; beyond it Acquire fails with ErrOverloaded. Default 100.
	QueueDepth int
	// StartTimeout bounds starting and specializing an instance. Default 30s.
	StartTimeout time.Duration
	// Pids limits the processes (threads included) of an instance, plus one
	// per concurrent invocation, where a pids cgroup is available. Default
	// 256.
	Pids int
	// Sandbox confines instances; nil runs them as the server's user.
	Sandbox *sandbox.Sandbox
	// Egress filters the network of the instances of functions with public
	// egress; nil where it cannot (EgressUnavailable says why), and then
	// Deploy refuses them.
	Egress            *sandbox.EgressFilter
	EgressUnavailable string
	// PublicEgress gives every function public egress, whatever its own
	// setting; Start fails where that cannot be enforced.
	PublicEgress bool
	// Zygotes forks the instances of runtimes that can be forked
	// (runtime.Forker) from a zygote per runtime and namespace, where the
	// sandbox runs in the root mode and every limit is a cgroup's.
	Zygotes bool
}

func (c *Config) defaults() {
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 5 * time.Minute
	}
	if c.QueueDepth <= 0 {
		c.QueueDepth = 100
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.Pids <= 0 {
		c.Pids = 256
	}
}

// Runtimes looks up runtime providers; *runtime.Registry implements it.
type Runtimes interface {
	Get(name string) (runtime.Provider, error)
}

// Executor implements runtime.Deployer and runtime.Instances with local
// processes.
type Executor struct {
	cfg      Config
	runtimes Runtimes
	log      *slog.Logger

	dir     string // wrappers and sockets, short enough for socket paths
	nextID  atomic.Uint64
	baseEnv []string
	mem     *memoryLimiter
	egress  *egressCgroups
	// zygotes says instances are forked where their runtime can be.
	zygotes bool

	// mu guards the maps; every invocation reads pools.
	mu      sync.RWMutex
	pools   map[meta.Key]*pool
	spares  map[string]*spares
	forkers map[forkerKey]*forker
	// wrappers maps a runtime to its wrapper file, written once.
	wrappers map[string]string
	// onUndeploy are told about every Undeploy (runtime.UndeployNotifier).
	onUndeploy []func(meta.Key)
	// reapable holds the pools the reaper visits, so that an idle server
	// does not scan every function each second: a pool joins when it gets
	// an instance or a minimum to keep, and leaves when the reaper finds it
	// with neither (see pool.reap). reapMu is taken under a pool's lock,
	// never the other way round.
	reapMu   sync.Mutex
	reapable map[*pool]struct{}

	ctx    context.Context // cancelled by Stop
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// live counts the processes that have not exited yet, stopped in the
	// background included: Stop removes the runtime directory after them.
	live sync.WaitGroup
}

var (
	_ runtime.Deployer         = (*Executor)(nil)
	_ runtime.Instances        = (*Executor)(nil)
	_ runtime.StatsReporter    = (*Executor)(nil)
	_ runtime.UndeployNotifier = (*Executor)(nil)
)

// New returns a stopped executor.
func New(cfg Config, runtimes Runtimes, log *slog.Logger) *Executor {
	cfg.defaults()
	return &Executor{cfg: cfg, runtimes: runtimes, log: log,
		pools: map[meta.Key]*pool{}, spares: map[string]*spares{}, forkers: map[forkerKey]*forker{}, wrappers: map[string]string{},
		reapable: map[*pool]struct{}{}}
}

// Start creates the executor's runtime directory and starts the idle reaper.
func (e *Executor) Start(ctx context.Context) error {
	if n := removeDeadTempDirs(""); n > 0 {
		e.log.Info("removed the temp directories of servers that did not stop", "count", n)
	}
	dir, err := tempdir.Make("", "")
	if err != nil {
		return fmt.Errorf("creating the instance directory: %w", err)
	}
	e.dir = dir
	e.baseEnv = baseEnv(e.cfg.Sandbox != nil)
	e.mem = newMemoryLimiter(filepath.Base(dir), e.cfg.Pids, e.cfg.Sandbox != nil)
	e.log.Info("instance memory limits", "mechanism", e.mem.mode)
	e.egress = newEgressCgroups(e.cfg.Egress, e.cfg.EgressUnavailable, e.mem, filepath.Base(dir), e.log)
	if e.cfg.PublicEgress && e.egress.filter == nil {
		e.mem.close()
		os.RemoveAll(dir)
		return fmt.Errorf("public egress for every instance is unavailable: %s", e.egress.unavailable)
	}
	if why := e.zygotesUnavailable(); why != "" {
		e.log.Info("instances are not forked from zygotes", "reason", why)
	} else {
		// A zygote's init runs as a uid of the sandbox's range and passes
		// this directory to its own, which only that uid may enter.
		if err := os.Chmod(dir, 0o711); err != nil {
			e.mem.close()
			os.RemoveAll(dir)
			return fmt.Errorf("opening the instance directory to zygotes: %w", err)
		}
		e.zygotes = true
		e.log.Info("instances of the runtimes that can be forked are forked from a zygote per runtime and namespace")
	}
	// Instances outlive the start context; Stop cancels theirs.
	e.ctx, e.cancel = context.WithCancel(context.WithoutCancel(ctx))
	e.wg.Go(e.reapLoop)
	return nil
}

// Stop stops every instance and spare and removes the runtime directory.
// The HTTP server has drained invocations before.
func (e *Executor) Stop(ctx context.Context) error {
	if e.cancel == nil {
		return nil
	}
	e.cancel()
	e.mu.Lock()
	pools, spareSets, forkers := e.pools, e.spares, e.forkers
	e.pools, e.spares, e.forkers = map[meta.Key]*pool{}, map[string]*spares{}, map[forkerKey]*forker{}
	e.mu.Unlock()
	for _, f := range forkers {
		f.stop()
	}
	var wg sync.WaitGroup
	for _, p := range pools {
		for _, inst := range p.shutdown() {
			wg.Go(func() { inst.proc.stop(2 * time.Second) })
		}
	}
	for _, s := range spareSets {
		for _, pr := range s.drain() {
			wg.Go(func() { pr.stop(2 * time.Second) })
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); e.wg.Wait(); e.live.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("stopping instances: %w", ctx.Err())
	}
	// The egress keeper may be a child of the memory cgroups' parent.
	e.egress.close()
	e.mem.close()
	return os.RemoveAll(e.dir)
}

// Deploy implements runtime.Deployer. The version serves at once: its
// instances start on demand.
func (e *Executor) Deploy(_ context.Context, t runtime.Target) (runtime.Rollout, error) {
	p, err := e.runtimes.Get(t.Runtime)
	if err != nil {
		return runtime.Rollout{}, err
	}
	if e.cfg.PublicEgress {
		t.Egress = runtime.EgressPublic
	}
	if err := e.egress.check(&t); err != nil {
		return runtime.Rollout{}, err
	}
	k := t.Key()
	e.mu.Lock()
	pl, ok := e.pools[k]
	if !ok {
		// Published with its target: an Acquire may find it at once.
		pl = newPool(e, k, t)
		e.pools[k] = pl
	}
	if e.cfg.Spares > 0 && !readsStartupEnv(p, t.Env) {
		e.sparesLocked(p).ensure()
	}
	e.mu.Unlock()
	for _, inst := range pl.deploy(t) {
		go inst.proc.stop(2 * time.Second)
	}
	return runtime.Rollout{Ready: true}, nil
}

// Undeploy implements runtime.Deployer.
func (e *Executor) Undeploy(_ context.Context, key meta.Key) error {
	e.mu.Lock()
	pl, ok := e.pools[key]
	delete(e.pools, key)
	e.mu.Unlock()
	if ok {
		for _, inst := range pl.shutdown() {
			go inst.proc.stop(2 * time.Second)
		}
	}
	// Also for a function that had no pool: its invocations may have been
	// counted as not ready.
	for _, f := range e.onUndeploy {
		f(key)
	}
	return nil
}

// OnUndeploy implements runtime.UndeployNotifier.
func (e *Executor) OnUndeploy(f func(key meta.Key)) {
	e.onUndeploy = append(e.onUndeploy, f)
}

// InstanceStats implements runtime.StatsReporter.
func (e *Executor) InstanceStats() []runtime.InstanceStats {
	e.mu.RLock()
	pools := make([]*pool, 0, len(e.pools))
	for _, p := range e.pools {
		pools = append(pools, p)
	}
	e.mu.RUnlock()
	out := make([]runtime.InstanceStats, 0, len(pools))
	for _, p := range pools {
		out = append(out, p.stats())
	}
	return out
}

// Acquire implements runtime.Instances.
func (e *Executor) Acquire(ctx context.Context, key meta.Key) (runtime.Lease, error) {
	pl, err := e.pool(key)
	if err != nil {
		return nil, err
	}
	return pl.acquire(ctx)
}

// Warm implements runtime.Instances.
func (e *Executor) Warm(_ context.Context, key meta.Key, until time.Time) error {
	pl, err := e.pool(key)
	if err != nil {
		return err
	}
	pl.warm(until)
	return nil
}

// pool returns the function's pool, or ErrNotDeployed.
func (e *Executor) pool(key meta.Key) (*pool, error) {
	e.mu.RLock()
	pl, ok := e.pools[key]
	e.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%s: %w", key, runtime.ErrNotDeployed)
	}
	return pl, nil
}

// startInstance starts a process for t: a specialized spare, or a fresh
// process when there is none or the function's env must be there at start.
// refill, when not nil, starts the replacement of the spare it took; the
// caller calls it once, when the start no longer needs the CPU: a fork
// beside the cold start's first invocation slows that invocation down. A
// start that fails starts the replacement itself.
func (e *Executor) startInstance(ctx context.Context, t *runtime.Target) (pr *process, refill func(), err error) {
	p, err := e.runtimes.Get(t.Runtime)
	if err != nil {
		return nil, nil, runtime.Errorf(runtime.ErrStart, fmt.Sprintf("the runtime %q is not available on this server", t.Runtime), err)
	}
	env := e.functionEnv(t)
	if readsStartupEnv(p, t.Env) {
		pr, err = e.spawn(ctx, p, envList(env), t.Artifact)
	} else {
		pr, refill, err = e.generic(ctx, p, t.Namespace)
	}
	if err != nil {
		e.log.Error("an instance process could not be started", "namespace", t.Namespace, "function", t.Name, "error", err)
		err = runtime.Errorf(runtime.ErrStart, "the instance process could not be started; the server log has the details", err)
	} else if err = e.prepare(ctx, pr, t, env); err != nil {
		pr.kill()
	}
	if err != nil {
		if refill != nil {
			refill()
		}
		return nil, nil, err
	}
	return pr, refill, nil
}

// prepare makes a started process t's instance: its network filter, then
// the specialize.
func (e *Executor) prepare(ctx context.Context, pr *process, t *runtime.Target, env map[string]string) error {
	if t.Egress == runtime.EgressPublic {
		e.live.Add(1)
		if err := e.egress.apply(pr, e.live.Done); err != nil {
			e.live.Done()
			return runtime.Errorf(runtime.ErrStart, "the instance's network filter (egress \"public\") could not be applied; the server log has the details", err)
		}
	}
	return pr.specialize(ctx, t, env, e.mem)
}

// generic returns a generic process of p for namespace ns: one forked from
// the namespace's zygote where p's instances are forked, else a spare or a
// process started now. Until the zygote runs, a spare that is ready serves
// (and the zygote starts in the background); when none is, waiting for the
// zygote costs no more than starting a process. refill, when not nil,
// replaces the spare it returned: the caller calls it once.
func (e *Executor) generic(ctx context.Context, p runtime.Provider, ns string) (pr *process, refill func(), err error) {
	e.mu.Lock()
	s := e.sparesLocked(p)
	e.mu.Unlock()
	f := e.forkerFor(p, ns)
	if f == nil {
		return s.take(ctx)
	}
	if !f.running() {
		if pr := s.takeReady(); pr != nil {
			e.wg.Go(func() { f.zygote(e.ctx) })
			return pr, s.ensure, nil
		}
	}
	pr, refill, err = f.take(ctx)
	if err != nil && ctx.Err() == nil {
		// A zygote that started but cannot fork must not fail cold starts.
		e.log.Error("forking an instance failed; starting one instead", "runtime", p.Name(), "namespace", ns, "error", err)
		f.failed()
		pr, err = nil, nil
	}
	if pr != nil || err != nil {
		return pr, refill, err
	}
	return s.take(ctx)
}

// spawn starts a generic process of p with env; code is the artifact it
// will serve, "" for a spare.
func (e *Executor) spawn(ctx context.Context, p runtime.Provider, env []string, code string) (*process, error) {
	wrapper, err := e.wrapper(p)
	if err != nil {
		return nil, err
	}
	l := launch{wrapper: wrapper, dir: e.dir, id: fmt.Sprintf("i%d", e.nextID.Add(1)), env: env, exited: e.live.Done}
	if e.cfg.Sandbox != nil {
		if l.box, err = e.cfg.Sandbox.NewInstance(filepath.Join(e.dir, l.id), code); err != nil {
			return nil, err
		}
	}
	e.live.Add(1)
	return startProcess(ctx, p, l, e.limits(), e.log)
}

func (e *Executor) limits() limits { return limits{mem: e.mem, egress: e.egress} }

// wrapper writes the runtime's wrapper file once and returns its path.
func (e *Executor) wrapper(p runtime.Provider) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if path, ok := e.wrappers[p.Name()]; ok {
		return path, nil
	}
	name, content := p.Wrapper()
	dir := filepath.Join(e.dir, "wrappers", p.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, content, 0o644); err != nil {
		return "", fmt.Errorf("writing the %s wrapper: %w", p.Name(), err)
	}
	e.wrappers[p.Name()] = path
	return path, nil
}

func (e *Executor) sparesLocked(p runtime.Provider) *spares {
	s, ok := e.spares[p.Name()]
	if !ok {
		s = &spares{e: e, p: p, want: e.cfg.Spares}
		e.spares[p.Name()] = s
	}
	return s
}

// functionEnv is the complete environment of a function's instances: the
// base environment, the function's own, and the platform's SLESS_ variables.
func (e *Executor) functionEnv(t *runtime.Target) map[string]string {
	env := make(map[string]string, len(e.baseEnv)+len(t.Env)+2)
	for _, kv := range e.baseEnv {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for k, v := range t.Env {
		env[k] = v
	}
	env["SLESS_FUNCTION"] = t.Name
	env["SLESS_NAMESPACE"] = t.Namespace
	return env
}

// baseEnv is what every instance inherits from the server: enough to find
// programs and write temporary files, nothing that configures the server.
// A confined instance gets the sandbox's fixed environment instead.
func baseEnv(confined bool) []string {
	if confined {
		return sandbox.Env()
	}
	env := []string{"LANG=C.UTF-8"}
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "TZ"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

func readsStartupEnv(p runtime.Provider, env map[string]string) bool {
	r, ok := p.(runtime.StartupEnvReader)
	if !ok {
		return false
	}
	for k := range env {
		if r.ReadsAtStartup(k) {
			return true
		}
	}
	return false
}

// reapLoop stops idle instances and keeps MinInstances running.
func (e *Executor) reapLoop() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
		}
		e.reapIdle(time.Now())
	}
}

// reapIdle stops the instances idle at now for longer than the idle
// timeout, as the reaper does every second (tests call it with a time of
// their own instead of waiting), and keeps MinInstances running.
func (e *Executor) reapIdle(now time.Time) {
	e.reapMu.Lock()
	pools := make([]*pool, 0, len(e.reapable))
	for p := range e.reapable {
		pools = append(pools, p)
	}
	e.reapMu.Unlock()
	for _, p := range pools {
		for _, inst := range p.reap(now, e.cfg.IdleTimeout) {
			e.log.Debug("stopping idle instance", "namespace", p.key.Namespace, "function", p.key.Name, "pid", inst.proc.pid)
			go inst.proc.stop(2 * time.Second)
		}
	}
	e.mu.RLock()
	forkers := make([]*forker, 0, len(e.forkers))
	for _, f := range e.forkers {
		forkers = append(forkers, f)
	}
	e.mu.RUnlock()
	for _, f := range forkers {
		f.retireIfIdle(now, e.cfg.IdleTimeout)
	}
}

// spares keeps pre-started generic processes of one runtime.
type spares struct {
	e    *Executor
	p    runtime.Provider
	want int

	mu       sync.Mutex
	ready    []*process
	starting int
	stopped  bool
}

// ensure starts spares in the background up to want.
func (s *spares) ensure() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.stopped && len(s.ready)+s.starting < s.want {
		s.starting++
		s.e.wg.Go(s.startOne)
	}
}

func (s *spares) startOne() {
	ctx, cancel := context.WithTimeout(s.e.ctx, s.e.cfg.StartTimeout)
	defer cancel()
	pr, err := s.e.spawn(ctx, s.p, s.e.baseEnv, "")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.starting--
	switch {
	case err != nil && s.e.ctx.Err() != nil:
		// Stop cancelled the start: shutting down is not a failure.
	case err != nil:
		s.e.log.Error("pre-starting an instance failed", "runtime", s.p.Name(), "error", err)
	case s.stopped:
		go pr.stop(time.Second)
	default:
		s.ready = append(s.ready, pr)
	}
}

// take returns a ready spare and refill, which starts its replacement, or
// starts a process when none is ready (and the spares in the background).
func (s *spares) take(ctx context.Context) (pr *process, refill func(), err error) {
	if pr := s.takeReady(); pr != nil {
		return pr, s.ensure, nil
	}
	pr, err = s.e.spawn(ctx, s.p, s.e.baseEnv, "")
	return pr, nil, err
}

// takeReady returns a ready spare, whose replacement the caller starts with
// ensure; or nil, and then starts the spares in the background.
func (s *spares) takeReady() *process {
	s.mu.Lock()
	var pr *process
	for len(s.ready) > 0 && pr == nil {
		pr = s.ready[0]
		s.ready = s.ready[1:]
		if pr.exited() {
			pr = nil
		}
	}
	s.mu.Unlock()
	if pr == nil {
		s.ensure()
	}
	return pr
}

// drain stops pre-starting and returns the ready spares.
func (s *spares) drain() []*process {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	ready := s.ready
	s.ready = nil
	return ready
}
