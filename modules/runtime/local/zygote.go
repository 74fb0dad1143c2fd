package local

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
)

// zygoteRetry is how long a runtime and namespace whose zygote failed to
// start get processes started by the init instead, before the next try.
const zygoteRetry = time.Minute

// zygoteIdle is how long a zygote that forks nothing is kept at least (the
// idle timeout when that is longer): it makes the next cold starts of its
// namespace, which come when its instances have scaled to zero, fork
// instead of starting an interpreter and a zygote again.
const zygoteIdle = 10 * time.Minute

// forkerKey names a forker: a zygote is a tenant's own, since its instances
// share its memory as it was when they were forked, the interpreter's hash
// secret and address layout included.
type forkerKey struct{ runtime, namespace string }

// forker forks the instances of one runtime and namespace from a zygote of
// their own (sandbox.Zygote), started at the first cold start that wants
// one and retired after zygoteIdle (or the idle timeout) without a fork. It
// keeps spares forked ahead, as the executor keeps started ones for the
// other runtimes. Instances a retired or dead zygote forked keep running;
// the next cold start starts a new zygote.
type forker struct {
	e   *Executor
	p   runtime.Provider
	key forkerKey

	mu       sync.Mutex
	z        *sandbox.Zygote // nil while none runs
	starting chan struct{}   // closed when the start in progress ends
	retryAt  time.Time       // after a failed start
	spares   []*process
	forking  int // spares being forked
	lastUsed time.Time
	stopped  bool
}

// forkerFor returns the forker of p's instances in namespace ns, or nil
// where p's instances are not forked.
func (e *Executor) forkerFor(p runtime.Provider, ns string) *forker {
	if !e.zygotes {
		return nil
	}
	if _, ok := p.(runtime.Forker); !ok {
		return nil
	}
	k := forkerKey{p.Name(), ns}
	e.mu.Lock()
	defer e.mu.Unlock()
	f, ok := e.forkers[k]
	if !ok {
		f = &forker{e: e, p: p, key: k}
		e.forkers[k] = f
	}
	return f
}

// running reports whether the zygote can fork now.
func (f *forker) running() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.z != nil && f.z.Forking()
}

// take returns a forked spare and refill, which forks its replacement, or
// forks a process when none is ready (and the spares in the background),
// starting the zygote (or waiting for the start in progress) if need be.
// It returns no process and no error when the zygote cannot start now: the
// caller starts a process instead.
func (f *forker) take(ctx context.Context) (pr *process, refill func(), err error) {
	z, err := f.zygote(ctx)
	if z == nil || err != nil {
		return nil, nil, err
	}
	f.mu.Lock()
	f.lastUsed = time.Now()
	for len(f.spares) > 0 && pr == nil {
		pr, f.spares = f.spares[0], f.spares[1:]
		if pr.exited() {
			pr = nil
		}
	}
	if pr == nil {
		f.ensureLocked()
	}
	f.mu.Unlock()
	if pr != nil {
		return pr, f.ensure, nil
	}
	pr, err = f.fork(ctx, z)
	if errors.Is(err, sandbox.ErrNotForking) {
		// The zygote ended between zygote's check and the fork, which did
		// not break it: the caller starts a process, and the next take a
		// zygote, with no wait for a retry.
		return nil, nil, nil
	}
	return pr, nil, err
}

// ensure forks spares in the background up to the executor's number.
func (f *forker) ensure() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ensureLocked()
}

// zygote returns the running zygote, starting one if there is none and it
// may; nil when there is none.
func (f *forker) zygote(ctx context.Context) (*sandbox.Zygote, error) {
	f.mu.Lock()
	if f.z != nil && !f.z.Forking() {
		// It died: its instances keep running, and it ends after them.
		f.z.Retire()
		f.z = nil
	}
	z, starting := f.z, f.starting
	if z == nil && starting == nil && !f.stopped && !time.Now().Before(f.retryAt) {
		starting = make(chan struct{})
		f.starting = starting
		f.e.wg.Go(func() { f.start(starting) })
	}
	f.mu.Unlock()
	if z != nil || starting == nil {
		return z, nil
	}
	select {
	case <-starting:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.z, nil
}

// start starts the zygote, then its spares, and closes done.
func (f *forker) start(done chan struct{}) {
	ctx, cancel := context.WithTimeout(f.e.ctx, f.e.cfg.StartTimeout)
	defer cancel()
	z, err := f.e.startZygote(ctx, f.p, f.key.namespace)
	f.mu.Lock()
	defer f.mu.Unlock()
	defer close(done)
	f.starting = nil
	switch {
	case err != nil:
		f.retryAt = time.Now().Add(zygoteRetry)
		if f.e.ctx.Err() == nil {
			f.e.log.Error("a zygote could not start; instances are started without one meanwhile",
				"runtime", f.key.runtime, "namespace", f.key.namespace, "retry_in", zygoteRetry, "error", err)
		}
	case f.stopped:
		z.Retire()
	default:
		f.z, f.lastUsed = z, time.Now()
		f.ensureLocked()
	}
}

// ensureLocked forks spares in the background up to the executor's number.
func (f *forker) ensureLocked() {
	for f.z != nil && !f.stopped && len(f.spares)+f.forking < f.e.cfg.Spares {
		f.forking++
		z := f.z
		f.e.wg.Go(func() {
			ctx, cancel := context.WithTimeout(f.e.ctx, f.e.cfg.StartTimeout)
			defer cancel()
			pr, err := f.fork(ctx, z)
			if err == nil {
				warmUp(ctx, pr)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			f.forking--
			switch {
			case err != nil && f.e.ctx.Err() == nil && z.Forking():
				f.e.log.Error("forking a spare failed", "runtime", f.key.runtime, "namespace", f.key.namespace, "error", err)
			case err != nil:
			case f.stopped || f.z != z:
				go pr.stop(time.Second)
			default:
				f.spares = append(f.spares, pr)
			}
		})
	}
}

// warmUp sends a spare its first request, a health check, ahead of the
// cold start that will take it: the first request a forked process serves
// pays for the connection and for the pages its interpreter touches for the
// first time (copy-on-write), which its specialize would pay otherwise.
// A spare that fails it is found out by its specialize.
func warmUp(ctx context.Context, pr *process) {
	pr.client.Call(ctx, "GET", "/_sless/health", nil)
}

// fork forks a generic process from z.
func (f *forker) fork(ctx context.Context, z *sandbox.Zygote) (*process, error) {
	e := f.e
	box, err := z.NewInstance()
	if err != nil {
		return nil, err
	}
	e.live.Add(1)
	l := launch{id: fmt.Sprintf("i%d", e.nextID.Add(1)), box: box, env: e.baseEnv, exited: e.live.Done}
	return forkProcess(ctx, f.p, z, l, e.limits(), e.log)
}

// retireIfIdle retires the zygote when it forked nothing for zygoteIdle or
// idle, whichever is longer, and stops its spares.
func (f *forker) retireIfIdle(now time.Time, idle time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.z == nil || now.Sub(f.lastUsed) <= max(idle, zygoteIdle) {
		return
	}
	f.e.log.Debug("retiring an idle zygote", "runtime", f.key.runtime, "namespace", f.key.namespace)
	f.retireLocked()
}

func (f *forker) retireLocked() {
	for _, pr := range f.spares {
		go pr.stop(time.Second)
	}
	f.spares = nil
	if f.z != nil {
		f.z.Retire()
		f.z = nil
	}
}

// failed retires a zygote that could not fork: processes are started
// instead until zygoteRetry has passed.
func (f *forker) failed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retryAt = time.Now().Add(zygoteRetry)
	f.retireLocked()
}

// stop retires the zygote for good: the executor stops.
func (f *forker) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	f.retireLocked()
}

// startZygote starts a zygote of p for namespace ns in a directory of the
// executor's, in a memory and pids cgroup of its own (without a memory
// limit: the memory its instances share is charged to it), and counts it
// among the live processes until it has ended.
func (e *Executor) startZygote(ctx context.Context, p runtime.Provider, ns string) (*sandbox.Zygote, error) {
	interp, args, err := p.Interpreter(ctx)
	if err != nil {
		return nil, err
	}
	name, content := p.(runtime.Forker).Zygote()
	wname, wcontent := p.Wrapper()
	id := fmt.Sprintf("z%d", e.nextID.Add(1))
	log := e.log.With("runtime", p.Name(), "namespace", ns, "zygote", id)
	out := newLineLogger(log)
	z, err := e.cfg.Sandbox.StartZygote(ctx, sandbox.ZygoteConfig{Dir: filepath.Join(e.dir, id), Interpreter: interp, Args: args,
		Program: sandbox.File{Name: name, Content: content}, Wrapper: sandbox.File{Name: wname, Content: wcontent},
		Env: e.baseEnv, Output: out})
	if err != nil {
		return nil, out.lastOutput(err)
	}
	cg, err := e.mem.attach(z.Pid(), id)
	if err != nil {
		z.Close()
		return nil, err
	}
	e.live.Add(1)
	go func() {
		<-z.Done()
		out.Flush()
		cg.remove()
		e.live.Done()
	}()
	log.Info("zygote started")
	return z, nil
}

// zygotesUnavailable says why the executor forks no instances, "" when it
// does.
func (e *Executor) zygotesUnavailable() string {
	switch sb := e.cfg.Sandbox; {
	case !e.cfg.Zygotes:
		return "off by configuration"
	case sb == nil:
		return "the sandbox is off"
	case sb.Rootless():
		return "the sandbox runs in the rootless mode"
	case !e.mem.forkable():
		return "limits need memory and pids cgroups"
	}
	return ""
}
