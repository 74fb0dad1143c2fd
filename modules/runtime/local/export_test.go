package local

// CgroupParentOf returns the parent memory cgroup of e's instances, if any.
func CgroupParentOf(e *Executor) (string, bool) { return e.mem.parent, e.mem.parent != "" }

// RunDirOf returns the runtime directory of e.
func RunDirOf(e *Executor) string { return e.dir }
