package local

import "path/filepath"

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
