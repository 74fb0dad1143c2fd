package local

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// memoryLimiter enforces memory_mb on instance processes with the best
// mechanism the machine allows:
//
//   - a memory cgroup per instance (cgroup v2, or the v1 memory hierarchy),
//     when the server's own cgroup is writable: the limit counts what the
//     process really uses, and exceeding it gets the process killed, which
//     the platform reports as running out of memory;
//   - otherwise RLIMIT_DATA, which counts reserved private memory: an
//     allocation beyond it fails (Python: MemoryError). Reserved thread stacks
//     count too, so each concurrent invocation is granted 8 MiB more.
//
// It also bounds the processes (threads included) of each instance with the
// pids controller where there is one: of the same cgroup v2, or of the v1
// pids hierarchy; else, for sandboxed instances, with RLIMIT_NPROC, which
// counts the processes of a uid in a user namespace: of one instance alone,
// as each has a uid (root mode) or a user namespace (rootless mode) of its
// own.
type memoryLimiter struct {
	// mode names the mechanisms, for the start-up log.
	mode string
	// parent holds the instances' cgroups; empty in rlimit mode.
	parent string
	v2     bool
	// pidsParent holds the instances' v1 pids cgroups; pids2 says the v2
	// cgroups under parent limit pids too.
	pidsParent string
	pids2      bool
	// nproc says RLIMIT_NPROC limits the processes of instances without a
	// pids cgroup.
	nproc bool
	// pidsMax is the limit of an instance running one invocation at a time.
	pidsMax int
}

// threadStack is what RLIMIT_DATA grants per concurrent invocation for the
// stack a wrapper thread reserves.
const threadStack = 8 << 20

// parentPrefix starts the name of an executor's parent cgroup, followed by
// the server's pid, so that a later server can tell the cgroups of a dead one.
const parentPrefix = "sless-"

// newMemoryLimiter finds a writable memory cgroup below the server's own and
// creates the parent of the instances' cgroups there, named after the server's
// pid and name, or falls back to RLIMIT_DATA (and, when every instance has a
// process count of its own, sandboxed, RLIMIT_NPROC). It removes the cgroups
// that servers killed before their stop left behind.
func newMemoryLimiter(name string, pidsMax int, ownProcessCount bool) *memoryLimiter {
	m := newMemoryCgroups(name)
	m.pidsMax = pidsMax
	switch {
	case m.pids2:
		m.mode += ", pids.max in the same cgroups"
	default:
		if dir, err := cgroupV1ControllerDir("pids"); err == nil {
			removeStale(dir)
			parent := filepath.Join(dir, fmt.Sprintf("%s%d-%s", parentPrefix, os.Getpid(), name))
			if err := os.Mkdir(parent, 0o755); err == nil || errors.Is(err, os.ErrExist) {
				m.pidsParent = parent
				m.mode += ", pids cgroup v1 " + parent
			}
		}
		switch {
		case m.pidsParent != "":
		case ownProcessCount:
			m.nproc = true
			m.mode += ", RLIMIT_NPROC (no writable pids cgroup)"
		default:
			m.mode += ", no pids limit (no writable pids cgroup)"
		}
	}
	return m
}

func newMemoryCgroups(name string) *memoryLimiter {
	for _, find := range []func() (string, bool, error){cgroupV2Dir, cgroupV1Dir} {
		dir, v2, err := find()
		if err != nil {
			continue
		}
		removeStale(dir)
		parent := filepath.Join(dir, fmt.Sprintf("%s%d-%s", parentPrefix, os.Getpid(), name))
		if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			continue
		}
		pids2 := false
		if v2 {
			// Children get a controller only when the parent delegates it.
			control := filepath.Join(parent, "cgroup.subtree_control")
			pids2 = os.WriteFile(control, []byte("+memory +pids"), 0o644) == nil
			if !pids2 {
				if err := os.WriteFile(control, []byte("+memory"), 0o644); err != nil {
					os.Remove(parent)
					continue
				}
			}
		}
		mode := "cgroup v1"
		if v2 {
			mode = "cgroup v2"
		}
		return &memoryLimiter{mode: mode + " " + parent, parent: parent, v2: v2, pids2: pids2}
	}
	return &memoryLimiter{mode: "RLIMIT_DATA (no writable memory cgroup)"}
}

// removeStale removes the parent cgroups, and their instances' cgroups, of
// servers that no longer run, killing what still runs in them: no process of
// an instance outlives a server that died without stopping them.
func removeStale(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !ownerDead(e.Name(), parentPrefix) {
			continue
		}
		parent := filepath.Join(dir, e.Name())
		children, _ := os.ReadDir(parent)
		for _, c := range children {
			if c.IsDir() {
				cg := &memCgroup{dir: filepath.Join(parent, c.Name())}
				cg.killAll()
				cg.remove()
			}
		}
		os.Remove(parent)
	}
}

func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// memCgroup is one instance's cgroups; nil when there are none.
type memCgroup struct {
	dir string // memory (and v2 pids); "" without a memory cgroup
	v2  bool
	// pidsDir is the v1 pids cgroup, or dir in v2 with pids, or "".
	pidsDir string
}

// attach moves the process pid, which the server started and has not
// waited for, into new cgroups of its own (see create).
func (m *memoryLimiter) attach(pid int, id string) (*memCgroup, error) {
	cg, err := m.create(id)
	if err != nil {
		return nil, err
	}
	if err := cg.enterPid(pid); err != nil {
		cg.remove()
		return nil, err
	}
	return cg, nil
}

// create makes the cgroups of a new process id, without a memory limit yet;
// nil when there are none. It runs when a process starts, off the
// cold-start path: creating and entering a memory cgroup takes
// milliseconds, setting its limit does not.
//
// The cgroups belong to the server's user (root): an instance, running
// under another uid, can neither raise its limits nor leave them.
func (m *memoryLimiter) create(id string) (*memCgroup, error) {
	if m.parent == "" && m.pidsParent == "" {
		return nil, nil
	}
	cg := &memCgroup{v2: m.v2}
	if m.parent != "" {
		cg.dir = filepath.Join(m.parent, id)
		if m.pids2 {
			cg.pidsDir = cg.dir
		}
	}
	if m.pidsParent != "" {
		cg.pidsDir = filepath.Join(m.pidsParent, id)
	}
	for _, dir := range cg.dirs() {
		if err := os.Mkdir(dir, 0o755); err != nil {
			cg.remove()
			return nil, fmt.Errorf("creating the cgroup of %s: %w", id, err)
		}
	}
	if cg.pidsDir != "" {
		if err := cg.setPidsMax(m.pidsMax); err != nil {
			cg.remove()
			return nil, err
		}
	}
	return cg, nil
}

// forkable reports whether every limit is a cgroup's, so that a forked
// process, which joins its cgroups itself (procs), is limited without the
// server ever naming it by pid: the zygote's init, not the server, reaps
// it, so its pid may name another process once it has exited.
func (m *memoryLimiter) forkable() bool {
	return m.parent != "" && (m.pids2 || m.pidsParent != "")
}

// dirs returns the distinct directories of cg.
func (cg *memCgroup) dirs() []string {
	var dirs []string
	for _, d := range []string{cg.dir, cg.pidsDir} {
		if d != "" && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// enter writes pid ("0": the writer) into cg's cgroups.
func (cg *memCgroup) enter(pid string) error {
	for _, dir := range cg.dirs() {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// enterPid moves pid into cg's cgroups; on nil it does nothing.
func (cg *memCgroup) enterPid(pid int) error {
	if cg == nil {
		return nil
	}
	if err := cg.enter(strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("moving process %d into its cgroup: %w", pid, err)
	}
	return nil
}

// procs opens cg's cgroup.procs files for writing: a process that writes
// "0" to them enters cg, with the server's credentials, which opened them.
func (cg *memCgroup) procs() ([]*os.File, error) {
	var files []*os.File
	for _, dir := range cg.dirs() {
		f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

func (cg *memCgroup) setPidsMax(n int) error {
	if err := os.WriteFile(filepath.Join(cg.pidsDir, "pids.max"), []byte(strconv.Itoa(n)), 0o644); err != nil {
		return fmt.Errorf("limiting the processes of an instance: %w", err)
	}
	return nil
}

// killAll kills every process still in the cgroups.
func (cg *memCgroup) killAll() {
	for _, dir := range cg.dirs() {
		data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for f := range strings.FieldsSeq(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
}

// limit confines the process pid, attached to cg, to limitMB (when
// positive), and its processes to the pids limit plus one thread per
// concurrent invocation.
func (m *memoryLimiter) limit(cg *memCgroup, pid, limitMB, concurrency int) error {
	pids := m.pidsMax
	if concurrency > 1 {
		pids += concurrency
	}
	switch {
	case cg != nil && cg.pidsDir != "":
		if pids != m.pidsMax {
			if err := cg.setPidsMax(pids); err != nil {
				return err
			}
		}
	case m.nproc:
		// Lowering a limit needs no privilege: the server shares the
		// instance's uid outside in the rootless mode.
		n := uint64(pids)
		if err := unix.Prlimit(pid, unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}, nil); err != nil {
			return fmt.Errorf("limiting the processes of process %d: %w", pid, err)
		}
	}
	if limitMB <= 0 {
		return nil
	}
	bytes := int64(limitMB) << 20
	if cg == nil || cg.dir == "" {
		lim := uint64(bytes) + uint64(concurrency)*threadStack
		if err := unix.Prlimit(pid, unix.RLIMIT_DATA, &unix.Rlimit{Cur: lim, Max: lim}, nil); err != nil {
			return fmt.Errorf("limiting the memory of process %d: %w", pid, err)
		}
		return nil
	}
	// The limit is required; swap accounting may be compiled out. What the
	// process allocated before it was attached stays charged to the parent.
	type setting struct {
		name, value string
		required    bool
	}
	files := []setting{{"memory.max", fmt.Sprint(bytes), true}, {"memory.swap.max", "0", false}}
	if !cg.v2 {
		files = []setting{{"memory.limit_in_bytes", fmt.Sprint(bytes), true}, {"memory.memsw.limit_in_bytes", fmt.Sprint(bytes), false}}
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(cg.dir, f.name), []byte(f.value), 0o644); err != nil && f.required {
			return fmt.Errorf("setting %s of process %d: %w", f.name, pid, err)
		}
	}
	return nil
}

// oomKilled reports whether the kernel killed a process of the cgroup for
// exceeding its limit.
func (cg *memCgroup) oomKilled() bool {
	if cg == nil || cg.dir == "" {
		return false
	}
	file := "memory.oom_control"
	if cg.v2 {
		file = "memory.events"
	}
	data, err := os.ReadFile(filepath.Join(cg.dir, file))
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if n, ok := strings.CutPrefix(line, "oom_kill "); ok {
			return strings.TrimSpace(n) != "0"
		}
	}
	return false
}

// remove deletes the cgroups once their processes are gone.
func (cg *memCgroup) remove() {
	if cg == nil {
		return
	}
	for _, dir := range cg.dirs() {
		for range 20 {
			if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// close removes the parent cgroups.
func (m *memoryLimiter) close() {
	for _, dir := range []string{m.parent, m.pidsParent} {
		if dir != "" {
			os.Remove(dir)
		}
	}
}

// cgroupV2Dir returns the server's own cgroup v2 directory when it offers the
// memory controller.
func cgroupV2Dir() (string, bool, error) {
	rel, err := selfCgroup(func(controllers string) bool { return controllers == "" })
	if err != nil {
		return "", false, err
	}
	mount, root, err := cgroupMount(func(fstype, opts string) bool { return fstype == "cgroup2" })
	if err != nil {
		return "", false, err
	}
	dir := filepath.Join(mount, strings.TrimPrefix(rel, root))
	ctrl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	// The file is a space-separated list ending in a newline.
	if err != nil || !slices.Contains(strings.Fields(string(ctrl)), "memory") {
		return "", false, errors.New("no memory controller in the cgroup v2 hierarchy")
	}
	return dir, true, nil
}

// cgroupV1Dir returns the server's own directory in the v1 memory hierarchy.
func cgroupV1Dir() (string, bool, error) {
	dir, err := cgroupV1ControllerDir("memory")
	return dir, false, err
}

// cgroupV1ControllerDir returns the server's own directory in the v1
// hierarchy of controller.
func cgroupV1ControllerDir(controller string) (string, error) {
	rel, err := selfCgroup(func(controllers string) bool { return hasWord(controllers, controller) })
	if err != nil {
		return "", err
	}
	mount, root, err := cgroupMount(func(fstype, opts string) bool { return fstype == "cgroup" && hasWord(opts, controller) })
	if err != nil {
		return "", err
	}
	return filepath.Join(mount, strings.TrimPrefix(rel, root)), nil
}

// hasWord reports whether the comma-separated list holds word.
func hasWord(list, word string) bool { return slices.Contains(strings.Split(list, ","), word) }

// selfCgroup returns the path in /proc/self/cgroup of the hierarchy whose
// controller list matches.
func selfCgroup(match func(controllers string) bool) (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 && match(parts[1]) {
			return parts[2], nil
		}
	}
	return "", errors.New("no such cgroup hierarchy")
}

// cgroupMount returns the mount point and mounted root of the cgroup
// filesystem that matches, from /proc/self/mountinfo.
func cgroupMount(match func(fstype, opts string) bool) (mount, root string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory"
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) >= 5 && len(b) >= 3 && match(b[0], b[2]) {
			return a[4], a[3], nil
		}
	}
	return "", "", errors.New("no such cgroup mount")
}
