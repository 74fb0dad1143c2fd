package local

import (
	"path/filepath"
	"time"

	"sless.kube5s.ru/sless/modules/meta"
)

// CgroupParentOf returns the parent memory cgroup of e's instances, if any.
func CgroupParentOf(e *Executor) (string, bool) { return e.mem.parent, e.mem.parent != "" }

// RunDirOf returns the runtime directory of e.
func RunDirOf(e *Executor) string { return e.dir }

// EgressDirOf returns the cgroup that holds e's egress keeper and, on a
// hybrid machine, the instances' network cgroups; "" without the filter.
func EgressDirOf(e *Executor) string {
	if e.egress.keeper == "" {
		return ""
	}
	return filepath.Dir(e.egress.keeper)
}

// ReapAt runs e's idle reaper as if the time were now.
func ReapAt(e *Executor, now time.Time) { e.reapIdle(now) }

// Reapable reports whether e's reaper visits function ns/name's pool.
func Reapable(e *Executor, ns, name string) bool {
	e.mu.RLock()
	p := e.pools[meta.Key{Namespace: ns, Name: name}]
	e.mu.RUnlock()
	e.reapMu.Lock()
	defer e.reapMu.Unlock()
	_, ok := e.reapable[p]
	return ok
}

// Pool is the state of a function's pool.
type Pool struct {
	// Up and Starting count its instances; InFlight its invocations, and
	// Waiting those in its queue.
	Up, Starting, InFlight, Waiting int
}

// PoolOf returns the state of function ns/name's pool; the zero Pool when
// it is not deployed.
func PoolOf(e *Executor, ns, name string) Pool {
	e.mu.RLock()
	p := e.pools[meta.Key{Namespace: ns, Name: name}]
	e.mu.RUnlock()
	if p == nil {
		return Pool{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := Pool{Up: len(p.instances), Starting: p.starting, Waiting: len(p.waiters)}
	for _, inst := range p.instances {
		st.InFlight += inst.inflight
	}
	return st
}

// Forks reports whether e forks the instances of runtimes that can be.
func Forks(e *Executor) bool { return e.zygotes }

// ZygotePid returns the pid of the init of the zygote that forks runtime rt's
// instances in namespace ns, 0 when none runs.
func ZygotePid(e *Executor, rt, ns string) int {
	e.mu.RLock()
	f := e.forkers[forkerKey{rt, ns}]
	e.mu.RUnlock()
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.z == nil || !f.z.Forking() {
		return 0
	}
	return f.z.Pid()
}

// ForkedSpares returns how many spares the zygote of runtime rt in
// namespace ns has ready, and how many it is forking.
func ForkedSpares(e *Executor, rt, ns string) (ready, forking int) {
	e.mu.RLock()
	f := e.forkers[forkerKey{rt, ns}]
	e.mu.RUnlock()
	if f == nil {
		return 0, 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.spares), f.forking
}

// InstancePids returns the pids of the instances of function ns/name.
func InstancePids(e *Executor, ns, name string) []int {
	e.mu.RLock()
	p := e.pools[meta.Key{Namespace: ns, Name: name}]
	e.mu.RUnlock()
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var pids []int
	for _, inst := range p.instances {
		pids = append(pids, inst.proc.pid)
	}
	return pids
}

// ForkFailed plays a fork of runtime rt in namespace ns that failed.
func ForkFailed(e *Executor, rt, ns string) {
	e.mu.RLock()
	f := e.forkers[forkerKey{rt, ns}]
	e.mu.RUnlock()
	f.failed()
}
