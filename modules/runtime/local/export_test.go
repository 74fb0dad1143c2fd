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

// InstancesOf returns how many instances of function ns/name are up, and
// how many are starting.
func InstancesOf(e *Executor, ns, name string) (up, starting int) {
	e.mu.RLock()
	p := e.pools[meta.Key{Namespace: ns, Name: name}]
	e.mu.RUnlock()
	if p == nil {
		return 0, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.instances), p.starting
}

// LoadOf returns how many invocations of function ns/name are in flight,
// and how many wait in its queue.
func LoadOf(e *Executor, ns, name string) (inflight, waiting int) {
	e.mu.RLock()
	p := e.pools[meta.Key{Namespace: ns, Name: name}]
	e.mu.RUnlock()
	if p == nil {
		return 0, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, inst := range p.instances {
		inflight += inst.inflight
	}
	return inflight, len(p.waiters)
}
