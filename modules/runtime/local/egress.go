package local

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
)

// egressCgroups apply the egress filter to the instances of functions with
// public egress: at specialize time, the filter is attached to a cgroup v2
// of the instance's own, which is its memory cgroup on a cgroup v2 machine,
// or, on a hybrid machine (whose memory cgroups are v1), one made for every
// process on the v2 hierarchy when it starts. The attachment is undone, and
// a made cgroup removed, when the process has exited.
//
// The filter stays attached to an empty cgroup beside the instances' for the
// executor's life: the kernel switches a kind of hook on when its first
// program is attached anywhere and off when its last goes, which takes
// about 30 ms each time; with the hooks kept on, attaching to an instance
// takes about 0.3 ms.
type egressCgroups struct {
	filter *sandbox.EgressFilter
	// unavailable says why public egress cannot be enforced; set when
	// filter is nil.
	unavailable string
	// parent holds the made cgroups; empty where memory cgroups are v2.
	parent string
	// keeper is the empty cgroup that keeps the hooks on; unkeep detaches
	// it.
	keeper string
	unkeep func()
}

// newEgressCgroups finds where the instances' v2 cgroups are, removing the
// made cgroups of servers that died without stopping. Without a place, it
// logs why and public egress is unavailable.
func newEgressCgroups(filter *sandbox.EgressFilter, unavailable string, mem *memoryLimiter, name string, log *slog.Logger) *egressCgroups {
	if filter == nil {
		return &egressCgroups{unavailable: unavailable}
	}
	fail := func(why string, err error) *egressCgroups {
		log.Warn("public egress is unavailable", "reason", why, "error", err)
		return &egressCgroups{unavailable: why}
	}
	g := &egressCgroups{filter: filter}
	base := mem.parent
	if !mem.v2 {
		dir, err := sandbox.CgroupV2Dir()
		if err != nil {
			return fail("it needs a cgroup v2 hierarchy", err)
		}
		removeStale(dir)
		g.parent = filepath.Join(dir, fmt.Sprintf("%s%d-%s", parentPrefix, os.Getpid(), name))
		if err := os.Mkdir(g.parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fail("it needs a writable cgroup v2 hierarchy", err)
		}
		base = g.parent
	}
	g.keeper = filepath.Join(base, "egress-hooks")
	err := os.Mkdir(g.keeper, 0o755)
	if err == nil {
		g.unkeep, err = filter.Attach(g.keeper)
	}
	if err != nil {
		g.close()
		return fail("the network filter cannot be attached to the instances' cgroups", err)
	}
	return g
}

// check refuses a target whose public egress cannot be enforced.
func (g *egressCgroups) check(t *runtime.Target) error {
	if t.Egress == runtime.EgressPublic && g.filter == nil {
		return runtime.Errorf(runtime.ErrUnsupported, fmt.Sprintf("egress %q is not available on this server: %s", runtime.EgressPublic, g.unavailable), nil)
	}
	return nil
}

// create makes the network cgroup of process id where instances need one of
// their own (a hybrid machine, whose memory cgroups are v1), nil elsewhere.
// The process enters it when it starts, and its exit removes it.
func (g *egressCgroups) create(id string) (*memCgroup, error) {
	if g.parent == "" {
		return nil, nil
	}
	cg := &memCgroup{dir: filepath.Join(g.parent, id), v2: true}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the network cgroup of %s: %w", id, err)
	}
	return cg, nil
}

// apply attaches the filter to the cgroup v2 of pr, which has not run
// function code yet: its network cgroup, or its memory cgroup on a cgroup
// v2 machine. cleanup runs once the process has exited and the filter is
// gone.
func (g *egressCgroups) apply(pr *process, cleanup func()) error {
	var dir string
	switch {
	case pr.netCgroup != nil:
		dir = pr.netCgroup.dir
	case pr.cgroup != nil && pr.cgroup.v2 && pr.cgroup.dir != "":
		dir = pr.cgroup.dir
	default:
		return errors.New("the instance has no cgroup v2 to filter its network")
	}
	detach, err := g.filter.Attach(dir)
	if err != nil {
		return err
	}
	go func() {
		<-pr.done
		detach()
		cleanup()
	}()
	return nil
}

// close detaches the keeper and removes it and the parent of the made
// cgroups.
func (g *egressCgroups) close() {
	if g.unkeep != nil {
		g.unkeep()
		g.unkeep = nil
	}
	for _, dir := range []string{g.keeper, g.parent} {
		if dir != "" {
			os.Remove(dir)
		}
	}
}
