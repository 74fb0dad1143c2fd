package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"sless.kube5s.ru/sless/modules/meta"
	"sless.kube5s.ru/sless/modules/runtime"
)

// instance is a specialized process serving one version of a function.
//
// It joins the pool when its specialize request is sent, unconfirmed: the
// first invocation goes behind that request (see process.specialize) and
// reads its answer, or, when no invocation waits for the instance, a
// goroutine of its own does (confirming). Until the answer confirms it,
// no other invocation takes it.
type instance struct {
	proc      *process
	target    *runtime.Target // the version it was started for
	startedAt time.Time       // when its start began
	// answeredAt is when the answer to its specialize request was read, in
	// Unix nanoseconds; 0 until then.
	answeredAt atomic.Int64
	// Guarded by the pool's mutex:
	inflight   int
	confirmed  bool // the handler loaded
	confirming bool // a goroutine reads the specialize answer
	lastUsed   time.Time
	gone       bool // removed from the pool; stop when idle
	// recycled: killed because it timed out or misbehaved, not stopped
	// as idle or drained.
	recycled bool
	// refill, until called, starts the replacement of the spare the
	// instance was made from (see startSpareReplacement).
	refill func()
}

// takenLocked reports whether an unconfirmed instance is taken: by the
// invocation that reads its specialize answer, or by the goroutine that
// does.
func (inst *instance) takenLocked() bool {
	return !inst.confirmed && (inst.inflight > 0 || inst.confirming)
}

// startSpareReplacement starts the replacement of the spare inst was made
// from, if it has not yet: the pool calls it when the instance's first
// invocation ends, when the instance leaves the pool, and at its start when
// no invocation waits for it.
func (inst *instance) startSpareReplacement() {
	if refill := inst.refill; refill != nil {
		inst.refill = nil
		go refill()
	}
}

// waiter is an Acquire waiting for capacity.
type waiter struct {
	ch chan grant
}

// grant hands a waiter a lease (its capacity counted already) or an error.
type grant struct {
	lease *lease
	err   error
}

// pool holds the instances of one function.
type pool struct {
	e   *Executor
	key meta.Key

	mu        sync.Mutex
	target    *runtime.Target
	instances []*instance // serving the current version, oldest first
	starting  int
	waiters   []*waiter
	removed   bool
	// warmUntil is when the invocation a warm was for is expected: until
	// then an instance is kept whatever the idle timeout.
	warmUntil time.Time
	// memoryKills and restarts count the instances killed for their
	// memory and those that ended other than by being stopped.
	memoryKills, restarts uint64
}

// newPool returns the pool of a function deployed as t; deploy(t) then
// starts its min_instances.
func newPool(e *Executor, key meta.Key, t runtime.Target) *pool {
	return &pool{e: e, key: key, target: &t}
}

// deploy makes t the current version and returns the instances to stop.
// Settings that do not need new processes (limits, timeout, suspension)
// apply in place; anything else drains the instances of the old version: they
// take no new invocations and stop when their last one finishes. A
// suspended function's idle instances stop now.
func (p *pool) deploy(t runtime.Target) []*instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	var stop []*instance
	if p.target.Version != t.Version {
		stop = p.drainLocked()
	}
	p.target = &t
	if p.keepsMinLocked() {
		p.setReapableLocked(true)
	}
	if t.Suspended {
		stop = append(stop, p.reapLocked(func(*instance) bool { return true }, 0)...)
	}
	p.dispatchLocked()
	p.ensureMinLocked()
	return stop
}

// warm starts an instance unless one is free or starting.
func (p *pool) warm(until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if until.After(p.warmUntil) {
		p.warmUntil = until
	}
	if p.removed || p.comingLocked() > 0 || p.pickLocked() != nil || len(p.instances) >= p.target.MaxInstances {
		return
	}
	p.startLocked()
}

// shutdown removes the pool: waiters fail, idle instances are returned to be
// stopped, busy ones stop when released.
func (p *pool) shutdown() []*instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.removed = true
	for _, w := range p.waiters {
		w.ch <- grant{err: fmt.Errorf("%s: %w", p.key, runtime.ErrNotDeployed)}
	}
	p.waiters = nil
	return p.drainLocked()
}

// drainLocked takes every instance out of service: the idle ones are
// returned to be stopped, busy ones stop when released.
func (p *pool) drainLocked() []*instance {
	var idle []*instance
	for _, inst := range p.instances {
		inst.gone = true
		inst.startSpareReplacement()
		if inst.inflight == 0 {
			idle = append(idle, inst)
		}
	}
	p.instances = nil
	return idle
}

// acquire returns a lease on an instance with spare capacity, starting an
// instance or queueing when there is none.
func (p *pool) acquire(ctx context.Context) (runtime.Lease, error) {
	p.mu.Lock()
	if p.removed {
		p.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", p.key, runtime.ErrNotDeployed)
	}
	if inst := p.pickLocked(); inst != nil {
		l := p.leaseLocked(inst)
		p.mu.Unlock()
		return l, nil
	}
	if n := len(p.waiters); n >= p.e.cfg.QueueDepth {
		p.mu.Unlock()
		return nil, fmt.Errorf("%s: %d invocations are waiting already: %w", p.key, n, runtime.ErrOverloaded)
	}
	w := &waiter{ch: make(chan grant, 1)}
	p.waiters = append(p.waiters, w)
	p.dispatchLocked()
	// Waiting for capacity is bounded like the invocation itself; while an
	// instance is starting that may serve this invocation, its start has a
	// bound of its own (StartTimeout, after which its waiters get the start's
	// error), so a slow cold start is not mistaken for a full pool.
	maxWait := p.target.Timeout
	if p.starting > 0 || slices.ContainsFunc(p.instances, func(inst *instance) bool { return !inst.confirmed }) {
		maxWait += p.e.cfg.StartTimeout
	}
	p.mu.Unlock()

	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	var cause error
	select {
	case g := <-w.ch:
		if g.err != nil {
			return nil, g.err
		}
		return g.lease, nil
	case <-ctx.Done():
		cause = context.Cause(ctx)
	case <-timer.C:
		cause = fmt.Errorf("%s: no instance became free within %s: %w", p.key, maxWait, runtime.ErrOverloaded)
	}
	p.mu.Lock()
	if i := slices.Index(p.waiters, w); i >= 0 {
		p.waiters = slices.Delete(p.waiters, i, i+1)
		p.mu.Unlock()
		return nil, cause
	}
	p.mu.Unlock()
	// Granted meanwhile: give the capacity back.
	if g := <-w.ch; g.lease != nil {
		g.lease.Release()
	}
	return nil, cause
}

// pickLocked returns the oldest instance with spare capacity, so that load
// concentrates on few instances and the others can go idle.
func (p *pool) pickLocked() *instance {
	for _, inst := range p.instances {
		if inst.inflight < p.target.Concurrency && !inst.takenLocked() && !inst.proc.exited() {
			return inst
		}
	}
	return nil
}

// comingLocked is the capacity that starting instances and unconfirmed ones
// will add.
func (p *pool) comingLocked() int {
	n := p.starting * p.target.Concurrency
	for _, inst := range p.instances {
		if !inst.confirmed {
			n += p.target.Concurrency - inst.inflight
		}
	}
	return n
}

// dispatchLocked hands capacity to waiters, and starts instances for the
// waiters that the instances being started will not cover.
func (p *pool) dispatchLocked() {
	if p.removed {
		return
	}
	for len(p.waiters) > 0 {
		inst := p.pickLocked()
		if inst == nil {
			break
		}
		p.waiters[0].ch <- grant{lease: p.leaseLocked(inst)}
		p.waiters = p.waiters[1:]
	}
	for coming := p.comingLocked(); len(p.waiters) > coming && len(p.instances)+p.starting < p.target.MaxInstances; coming += p.target.Concurrency {
		p.startLocked()
	}
}

// ensureMinLocked starts instances up to MinInstances.
func (p *pool) ensureMinLocked() {
	for p.keepsMinLocked() && len(p.instances)+p.starting < p.target.MinInstances {
		p.startLocked()
	}
}

// keepsMinLocked reports whether p keeps instances running while idle: it
// serves a version that asks for some and is neither suspended nor removed.
func (p *pool) keepsMinLocked() bool {
	return !p.removed && !p.target.Suspended && p.target.MinInstances > 0
}

// startLocked starts an instance of the current version in the background.
func (p *pool) startLocked() {
	p.starting++
	t := p.target
	p.e.wg.Go(func() {
		ctx, cancel := context.WithTimeout(p.e.ctx, p.e.cfg.StartTimeout)
		defer cancel()
		start := time.Now()
		pr, refill, err := p.e.startInstance(ctx, t)
		p.started(t, pr, refill, start, err)
	})
}

// started adds a started instance, unconfirmed, or reports a failed start
// to the waiters when nothing else can serve them. refill (see
// startInstance) waits in the instance for its first invocation to end,
// when one waits for it.
func (p *pool) started(t *runtime.Target, pr *process, refill func(), start time.Time, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starting--
	if err != nil {
		p.failedLocked(err)
		return
	}
	inst := &instance{proc: pr, target: t, startedAt: start, lastUsed: time.Now(), refill: refill}
	pr.specialized = func(err error) { p.specialized(inst, err) }
	stale := p.removed || t.Version != p.target.Version
	if stale || len(p.waiters) == 0 {
		inst.startSpareReplacement() // no invocation waits for it
	}
	if stale {
		go pr.stop(time.Second)
		p.dispatchLocked()
		return
	}
	if len(p.waiters) == 0 {
		inst.confirming = true
		p.e.wg.Go(func() { pr.client.Await() })
	}
	p.instances = append(p.instances, inst)
	p.setReapableLocked(true)
	p.e.wg.Go(func() { p.watch(inst) })
	p.dispatchLocked()
}

// specialized confirms inst once its handler loaded; an instance whose
// handler did not load is a failed start.
func (p *pool) specialized(inst *instance, err error) {
	inst.answeredAt.Store(time.Now().UnixNano())
	p.mu.Lock()
	defer p.mu.Unlock()
	inst.confirming = false
	if inst.gone {
		return
	}
	if err != nil {
		p.removeLocked(inst)
		go inst.proc.kill()
		p.failedLocked(err)
		return
	}
	inst.confirmed = true
	p.dispatchLocked()
}

// failedLocked reports a failed start to the waiters when nothing else can
// serve them.
func (p *pool) failedLocked(err error) {
	p.e.log.Error("starting an instance failed", "namespace", p.key.Namespace, "function", p.key.Name, "error", err)
	if len(p.instances) == 0 && p.starting == 0 {
		for _, w := range p.waiters {
			w.ch <- grant{err: err}
		}
		p.waiters = nil
	}
}

// watch removes an instance from the pool when its process exits.
func (p *pool) watch(inst *instance) {
	select {
	case <-inst.proc.done:
	case <-p.e.ctx.Done():
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if inst.proc.oom {
		p.memoryKills++
	}
	if !inst.gone || inst.recycled {
		// It crashed, was killed or timed out: the next invocation that
		// needs it starts another.
		p.restarts++
	}
	p.removeLocked(inst)
	p.dispatchLocked()
	p.ensureMinLocked()
}

// stats reports the pool's instances by state.
func (p *pool) stats() runtime.InstanceStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := runtime.InstanceStats{Key: p.key, Starting: p.starting, Queued: len(p.waiters),
		MemoryKills: p.memoryKills, Restarts: p.restarts}
	for _, inst := range p.instances {
		switch {
		case !inst.confirmed:
			s.Starting++
		case inst.inflight > 0:
			s.Busy++
		default:
			s.Idle++
		}
	}
	return s
}

func (p *pool) removeLocked(inst *instance) {
	inst.gone = true
	inst.startSpareReplacement()
	if i := slices.Index(p.instances, inst); i >= 0 {
		p.instances = slices.Delete(p.instances, i, i+1)
	}
}

// release returns one invocation's capacity.
func (p *pool) release(inst *instance) {
	p.mu.Lock()
	defer p.mu.Unlock()
	inst.inflight--
	inst.lastUsed = time.Now()
	inst.startSpareReplacement()
	if inst.gone {
		if inst.inflight == 0 {
			go inst.proc.stop(2 * time.Second)
		}
		return
	}
	p.dispatchLocked()
}

// recycle kills an instance that timed out or misbehaved; its process exit
// removes it from the pool.
func (p *pool) recycle(inst *instance) {
	p.mu.Lock()
	inst.recycled = true
	p.removeLocked(inst)
	p.mu.Unlock()
	inst.proc.kill()
}

// reap removes instances idle for longer than idle, keeping MinInstances
// and, until the invocation a warm was for, one instance, and returns them
// to be stopped.
func (p *pool) reap(now time.Time, idle time.Duration) []*instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	keep := p.target.MinInstances
	if p.target.Suspended {
		keep = 0
	}
	if now.Before(p.warmUntil) {
		keep = max(keep, 1)
	}
	out := p.reapLocked(func(inst *instance) bool { return now.Sub(inst.lastUsed) >= idle }, keep)
	p.ensureMinLocked()
	if len(p.instances) == 0 && !p.keepsMinLocked() {
		// Nothing to reap or keep until an instance starts (started) or a
		// minimum is deployed.
		p.setReapableLocked(false)
	}
	return out
}

// setReapableLocked puts p in the reaper's set, or takes it out.
func (p *pool) setReapableLocked(reapable bool) {
	p.e.reapMu.Lock()
	defer p.e.reapMu.Unlock()
	if reapable {
		p.e.reapable[p] = struct{}{}
	} else {
		delete(p.e.reapable, p)
	}
}

// reapLocked removes the idle instances that expired says, newest first (the
// oldest take the load, see pickLocked), keeping keep instances.
func (p *pool) reapLocked(expired func(*instance) bool, keep int) []*instance {
	var out []*instance
	for i := len(p.instances) - 1; i >= 0 && len(p.instances) > keep; i-- {
		inst := p.instances[i]
		if inst.inflight == 0 && expired(inst) {
			p.removeLocked(inst)
			out = append(out, inst)
		}
	}
	return out
}

// leaseLocked takes one invocation's capacity of inst. The lease that reads
// an unconfirmed instance's specialize answer reports its cold start.
func (p *pool) leaseLocked(inst *instance) *lease {
	inst.inflight++
	l := &lease{pool: p, inst: inst, target: inst.target, cold: !inst.confirmed}
	if p.target.Version == inst.target.Version {
		l.target = p.target // limits and timeout changed in place
	}
	return l
}

// crashStatusWait bounds how long a crashed invocation's answer waits for
// its process's exit status. 100 ms was too short at load average 20: the
// answer then named the broken connection instead of the exit status.
const crashStatusWait = time.Second

// lease implements runtime.Lease.
type lease struct {
	pool   *pool
	inst   *instance
	target *runtime.Target
	cold   bool // it reads its instance's specialize answer
}

func (l *lease) Target() *runtime.Target { return l.target }
func (l *lease) Release()                { l.pool.release(l.inst) }

// ColdStart implements runtime.Lease: until Do has read the specialize
// answer, the time since the start began.
func (l *lease) ColdStart() time.Duration {
	if !l.cold {
		return 0
	}
	if at := l.inst.answeredAt.Load(); at != 0 {
		return time.Unix(0, at).Sub(l.inst.startedAt)
	}
	return time.Since(l.inst.startedAt)
}

// Do implements runtime.Lease: a timeout recycles the instance (its handler
// is still running), a crash reports how the process ended.
func (l *lease) Do(ctx context.Context, inv *runtime.Invocation, w http.ResponseWriter) (runtime.Result, error) {
	res, err := l.inst.proc.client.Do(ctx, inv, w)
	switch {
	case errors.Is(err, runtime.ErrStart):
		// Its handler did not load: the pool has removed it (specialized).
	case l.cold && l.inst.answeredAt.Load() == 0:
		// It failed before the specialize answer was read: what the
		// instance is, nobody knows.
		l.pool.recycle(l.inst)
	case errors.Is(err, runtime.ErrTimeout):
		l.pool.recycle(l.inst)
	case errors.Is(err, runtime.ErrNotSent):
		// Gone before it got the invocation: the caller tries another.
		l.pool.recycle(l.inst)
	case errors.Is(err, runtime.ErrCrashed), errors.Is(res.Err, runtime.ErrCrashed):
		// No new invocation may pick it; wait for the exit status, to say
		// why. recycle kills the process, so it comes at once unless the
		// machine is very busy.
		l.pool.recycle(l.inst)
		reason := cmp.Or(err, res.Err)
		select {
		case <-l.inst.proc.done:
			reason = runtime.Errorf(runtime.ErrCrashed, l.inst.proc.exitReason(), reason)
		case <-time.After(crashStatusWait):
		}
		// A crash after the status went out is the response's failure.
		if res.Err != nil {
			res.Err = reason
		} else {
			err = reason
		}
	}
	return res, err
}
