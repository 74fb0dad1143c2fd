// Package sandbox confines the processes that run user code in the embedded
// mode: function instances and dependency installs (npm install scripts, pip's
// setup.py).
//
// A confined process is started as `sless sandbox-init SPEC`, a re-exec of
// the server's own binary in new mount, pid, IPC and UTS namespaces. The init
// side (Main) builds a root filesystem of its own in a tmpfs: the system's
// runtime files (/usr, /etc, the interpreter's prefix) read-only, the paths
// the caller binds, a size-limited /tmp, a small tmpfs for its socket, a
// /proc of the new pid namespace and a minimal /dev. It pivots into it,
// switches to its uid, sets no_new_privs, loads a seccomp filter and execs
// the program, which is pid 1 of its namespace: when it ends, the kernel
// kills every process it started.
//
// Mount namespaces were chosen over Landlock (ABI 7 on the reference kernel)
// because they hide what Landlock can only refuse (the server's /proc, the
// data directory's layout) and give each process its own /proc and /tmp;
// Landlock cannot replace the pid namespace or a private tmpfs.
//
// The sandbox has two modes, which differ only in credentials and in how an
// instance gets its code; the namespaces, mounts, filter and limits are the
// same code:
//
//   - root: a server that runs as root (with CAP_SETUID, CAP_SETGID,
//     CAP_CHOWN and CAP_SYS_ADMIN) gives every process tree a uid of its own
//     from a range, and mounts a function's code into a pre-started spare at
//     specialize time, from its own mount namespace;
//   - rootless: any other server starts every process in a new user
//     namespace too, where the server's uid and gid are the only ids (both
//     seen as the server's uid number, as uid and gid are equal in the root
//     mode) and the process has no capability outside. Every process runs
//     as the server's uid outside, so the mount and pid namespaces are what
//     keep the data directory and the other instances out of reach. The
//     server cannot mount into a running process without privileges, so the
//     init binds the code itself: a spare's init sets everything else up and
//     waits for its code's path before it starts the interpreter. The
//     supplementary groups of the server's user stay (an unprivileged user
//     namespace may not drop them).
//
// New probes the mode the server's privileges allow by starting a real
// sandbox; where neither works, "auto" turns the sandbox off and says why,
// "require" refuses.
//
// # Zygotes
//
// In the root mode, the instances of a runtime whose interpreter can fork
// (python) may instead be forked from a zygote (Zygote): an interpreter that
// has imported the wrapper once, whose memory its instances share
// copy-on-write until they write to it. The design:
//
//   - The processes. The server starts the zygote's init as uid 0 of a new
//     user namespace, which maps it to a uid of the range of its own and the
//     range's other uids to themselves, in new mount, pid, IPC and UTS
//     namespaces owned by that user namespace. The init builds a root as an
//     instance's, plus a slave of the server's shared directory of code
//     mount points; it drops the supplementary groups, empties its bounding
//     set but for CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID and CAP_SETPCAP,
//     sets no_new_privs and the zygote's filter (the instances' one but for
//     mount, umount2 and unshare of the namespaces an instance enters), and
//     execs the interpreter (runtimes/python3.11/zygote.py) as pid 1. That
//     process imports the wrapper, forks the zygote proper once, then
//     empties every capability set, adds the instances' filter and stays as
//     the reaper: it relays the server's requests, adopts the instances and
//     reports their exits. The zygote forks on request.
//   - A fork. The server makes the instance's cgroups, opens their
//     cgroup.procs files and makes its code mount point, and sends the
//     request with the instance's output and ready pipe and those files.
//     The zygote's child joins the cgroups by writing "0" to them (the
//     kernel checks the credentials of the server, which opened them),
//     closes every other descriptor, unshares mount, pid, IPC and UTS
//     namespaces and forks the instance, pid 1 of the new pid namespace,
//     then exits, so that the reaper adopts it. The instance replaces the
//     zygote's /tmp, /dev/shm, socket directory and /proc with its own,
//     binds its code mount point at /code (a slave of the server's: the
//     code MountCode mounts there at specialize appears) and unmounts the
//     others', switches to its uid, empties its capability sets, sets
//     no_new_privs, adds the instances' filter, and only then runs the
//     wrapper's main. The reaper gives the server a pidfd of it: the server
//     signals and reaches it through that, never by pid, since the reaper,
//     not the server, reaps it. Every limit of a forked instance is
//     therefore a cgroup's: where there is none, instances are started.
//   - Lifetimes. Instances outlive the zygote proper (Retire, a crash); they
//     die with the reaper, the init of the pid namespace theirs are nested
//     in, which dies with the server (parent-death signal).
//   - Sharing. A zygote serves one runtime and one namespace (the caller's
//     choice): an instance holds a copy of the zygote's memory as of its
//     fork, the interpreter's hash secret and address layout included,
//     which instances of other tenants must not know.
//
// What a forked instance must not get, and why it does not:
//
//   - User code never runs in the zygote or its reaper, nor with their
//     privileges: they run zygote.py and the wrapper's module-level
//     definitions only; the handler loads at specialize, in the instance,
//     after it dropped everything (the same checks as a started instance's
//     pass: TestForkedInstanceSeesOnlyItsOwnWorld).
//   - The zygote takes requests from its reaper only, and the reaper from
//     the control socket, whose only other end the server holds; an instance
//     inherits neither, nor any other descriptor of theirs. The zygote forks
//     the wrapper only (no request names a program) and refuses a uid that
//     is its own or outside the range. No request carries a secret: a
//     function's environment reaches its instance at specialize.
//   - Instances cannot signal, trace, read the memory or /proc of the
//     zygote, its reaper or a sibling: each is in a pid namespace of its
//     own below theirs (it cannot name them), runs as a uid of its own, and
//     the filter refuses ptrace and process_vm_*
//     (TestForkedInstanceCannotReachItsZygoteOrSiblings).
//   - The zygote's capabilities are of its own user namespace, which owns no
//     resource of the host: they let it mount in the namespaces it owns and
//     take any uid of the range, so the zygote is trusted like the server
//     with its namespace's instances, never with the host. It runs with
//     no_new_privs and a filter, as a uid of the range
//     (TestZygoteHoldsOnlyWhatItNeeds); the reaper holds no capability.
package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Mode says whether the sandbox is used.
type Mode string

// The modes.
const (
	// ModeAuto confines processes when the machine allows it, else runs them
	// unconfined and logs why.
	ModeAuto Mode = "auto"
	// ModeRequire refuses to start without the sandbox.
	ModeRequire Mode = "require"
	// ModeOff never confines processes.
	ModeOff Mode = "off"
)

// Config configures the sandbox.
type Config struct {
	// Mode is auto, require or off; default (empty) off, so that tests and
	// embedders opt in (the server's setting defaults to auto).
	Mode Mode
	// FirstUID and UIDs are the range of uids (and equal gids) given to
	// confined processes in the root mode, one per process; defaults 200000
	// and 65536.
	FirstUID, UIDs int
	// TmpMB is the size of an instance's /tmp (and /dev/shm); default 64.
	TmpMB int
	// BuildTmpMB is the size of a dependency install's /tmp, where pip and
	// npm unpack and cache packages; default 1024.
	BuildTmpMB int
	// BuildProcs limits the processes (threads included) of a dependency
	// install (RLIMIT_NPROC, counted per uid and user namespace: of the
	// install alone); default 512.
	BuildProcs int
}

func (c *Config) defaults() {
	if c.Mode == "" {
		c.Mode = ModeOff
	}
	if c.FirstUID <= 0 {
		c.FirstUID = 200000
	}
	if c.UIDs <= 0 {
		c.UIDs = 65536
	}
	if c.TmpMB <= 0 {
		c.TmpMB = 64
	}
	if c.BuildTmpMB <= 0 {
		c.BuildTmpMB = 1024
	}
	if c.BuildProcs <= 0 {
		c.BuildProcs = 512
	}
}

// ParseMode parses a mode setting.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeAuto, ModeRequire, ModeOff:
		return m, nil
	}
	return "", fmt.Errorf("sandbox %q: want auto, require or off", s)
}

// InitCommand is the hidden subcommand that runs Main.
const InitCommand = "sandbox-init"

// handlesInit is set by Init: the running binary can be re-executed as
// the sandbox's init.
var handlesInit bool

// Init runs the sandbox's init and never returns when the process was started
// as `<binary> sandbox-init ...`; otherwise it records that this binary can
// be re-executed so, and returns. main (and TestMain of tests that confine
// processes) calls it first.
func Init() {
	if len(os.Args) > 1 && os.Args[1] == InitCommand {
		os.Exit(Main(os.Args[2:]))
	}
	handlesInit = true
}

// Sandbox starts confined processes. A nil *Sandbox is valid and confines
// nothing (ModeOff).
type Sandbox struct {
	cfg Config
	exe string
	// userNS is the rootless mode: every process in a user namespace of its
	// own, as the server's uid and gid.
	userNS bool

	mu   sync.Mutex
	next int          // next uid offset to try
	used map[int]bool // uids of live processes
}

// New checks that the machine allows the sandbox and returns it, or nil with
// a reason when cfg.Mode is auto and it does not (nil, "", nil for off). With
// ModeRequire an unusable sandbox is an error.
func New(cfg Config) (sb *Sandbox, reason string, err error) {
	cfg.defaults()
	if cfg.Mode == ModeOff {
		return nil, "off by configuration", nil
	}
	if _, err := ParseMode(string(cfg.Mode)); err != nil {
		return nil, "", err
	}
	if cfg.FirstUID+cfg.UIDs > 1<<31-2 {
		return nil, "", fmt.Errorf("the sandbox uid range %d+%d is too large", cfg.FirstUID, cfg.UIDs)
	}
	root, why := rootPrivilege(os.Geteuid(), effectiveCaps())
	sb = &Sandbox{cfg: cfg, used: map[int]bool{}, userNS: !root}
	if err := sb.probe(why); err != nil {
		if cfg.Mode == ModeRequire {
			return nil, "", fmt.Errorf("the sandbox is required but unavailable: %w", err)
		}
		return nil, err.Error(), nil
	}
	return sb, "", nil
}

// Describe names the mode and lists the protections in force, for the
// start-up log.
func (s *Sandbox) Describe() string {
	if s == nil {
		return "none"
	}
	mode := fmt.Sprintf("root mode: own uid per process (%d-%d)", s.cfg.FirstUID, s.cfg.FirstUID+s.cfg.UIDs-1)
	if s.userNS {
		mode = fmt.Sprintf("rootless mode: user namespace per process as the server's uid %d, no capabilities outside, "+
			"code bound by the init (spares wait for it before the interpreter starts)", os.Geteuid())
	}
	return fmt.Sprintf("%s, mount+pid+ipc+uts namespaces, read-only code and system files, "+
		"private /tmp (%d MiB), no_new_privs, seccomp filter, process tree killed with its init", mode, s.cfg.TmpMB)
}

// Rootless reports whether the sandbox runs in the rootless mode, where
// every confined process runs as the server's uid in a user namespace of its
// own (and the server has no privilege over cgroups or network hooks).
func (s *Sandbox) Rootless() bool { return s != nil && s.userNS }

// rootCaps are the capabilities of the root mode: switching to the range's
// uids, giving a build directory to its install's uid, mounting.
var rootCaps = map[string]uint{"CAP_SETUID": unix.CAP_SETUID, "CAP_SETGID": unix.CAP_SETGID,
	"CAP_CHOWN": unix.CAP_CHOWN, "CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN}

// rootPrivilege reports whether a server with effective uid euid and the
// effective capability set caps may use the root mode, and otherwise why not.
func rootPrivilege(euid int, caps uint64) (bool, string) {
	var missing []string
	for name, c := range rootCaps {
		if caps&(1<<c) == 0 {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	switch {
	case euid != 0:
		return false, fmt.Sprintf("the server runs as uid %d, not root", euid)
	case len(missing) > 0:
		return false, "the server runs as root without " + strings.Join(missing, ", ")
	}
	return true, ""
}

// effectiveCaps returns the effective capability set of the process (0 when
// it cannot be read).
func effectiveCaps() uint64 {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0
	}
	return uint64(data[1].Effective)<<32 | uint64(data[0].Effective)
}

// probe starts the init in probe mode: it sets everything up as for a real
// process, checks that the seccomp filter refuses mount(2), and exits. Why
// says why the server has no root privilege, in the rootless mode.
func (s *Sandbox) probe(why string) error {
	if !handlesInit {
		return errors.New("this binary does not run " + InitCommand)
	}
	if s.userNS && os.Geteuid() == 0 {
		// Mapped to uid 0 inside, the program would keep the namespace's
		// capabilities across exec.
		return errors.New(why + ": run it as an ordinary user for the rootless mode, or with those capabilities")
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the server's binary: %w", err)
	}
	s.exe = exe
	dir, err := os.MkdirTemp("", "sless-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	uid, release, err := s.allocUID()
	if err != nil {
		return err
	}
	defer release()
	cmd := s.command(Spec{Root: dir, UID: uid, TmpMB: 1, SocketDir: socketDir, Argv: []string{"probe"}, Probe: true})
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		if errno := syscall.Errno(0); s.userNS && errors.As(err, &errno) {
			// clone(2) or writing the id maps failed.
			return fmt.Errorf("%s, and the kernel refuses it a user namespace (%v)%s", why, errno, userNSKnobs())
		}
		return fmt.Errorf("starting the sandbox test process: %w", err)
	}
	err = cmd.Wait()
	if err == nil {
		return nil
	}
	err = fmt.Errorf("the sandbox test process failed (%v): %s", err, strings.TrimSpace(out.String()))
	switch knobs := userNSKnobs(); {
	case !s.userNS:
		return err
	case knobs != "":
		// AppArmor's restriction lets clone(2) succeed without
		// capabilities in the namespace: the first mount fails.
		return fmt.Errorf("%s, and the kernel refuses it a user namespace (%w)%s", why, err, knobs)
	default:
		return fmt.Errorf("%s, and the rootless mode does not work here: %w", why, err)
	}
}

// userNSKnobs names the kernel settings that restrict unprivileged user
// namespaces and are set so, as "; name is value" (empty when none is).
// They differ between distributions.
func userNSKnobs() string {
	var b strings.Builder
	for _, k := range []struct{ file, restrictive string }{
		{"kernel/unprivileged_userns_clone", "0"},
		{"user/max_user_namespaces", "0"},
		{"kernel/apparmor_restrict_unprivileged_userns", "1"},
	} {
		if v, err := os.ReadFile("/proc/sys/" + k.file); err == nil && strings.TrimSpace(string(v)) == k.restrictive {
			fmt.Fprintf(&b, "; sysctl %s is %s", strings.ReplaceAll(k.file, "/", "."), k.restrictive)
		}
	}
	return b.String()
}

// ErrNoUID is returned when every uid of the range is in use.
var ErrNoUID = errors.New("every uid of the sandbox range is in use; widen --sandbox-uids")

// allocUID returns a free uid of the range and the func that frees it, or
// ErrNoUID: two process trees never share a uid. In the rootless mode it is
// the server's own uid, shared by all.
func (s *Sandbox) allocUID() (int, func(), error) {
	if s.userNS {
		return os.Geteuid(), func() {}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for range s.cfg.UIDs {
		uid := s.cfg.FirstUID + s.next
		s.next = (s.next + 1) % s.cfg.UIDs
		if !s.used[uid] {
			s.used[uid] = true
			return uid, func() {
				s.mu.Lock()
				delete(s.used, uid)
				s.mu.Unlock()
			}, nil
		}
	}
	return 0, nil, ErrNoUID
}

// command returns the command that runs spec's init.
func (s *Sandbox) command(spec Spec) *exec.Cmd {
	spec.UserNS = s.userNS
	data, _ := json.Marshal(spec)
	cmd := exec.Command(s.exe, InitCommand, string(data))
	// The init's own environment is empty: the program gets spec.Env.
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		Setpgid:    true,
		// The init sets it again after switching uids, which clears it.
		Pdeathsig: syscall.SIGKILL,
	}
	if spec.UserNS {
		// The other namespaces belong to the new user namespace. Go denies
		// setgroups(2) in it before writing the gid map, as unprivileged
		// mappings require. The init is not root there, so only an ambient
		// capability survives its exec: CAP_SYS_ADMIN of the namespace, to
		// mount; the init clears it before the program's exec.
		cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: spec.UID, HostID: os.Geteuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: spec.UID, HostID: os.Getegid(), Size: 1}}
		cmd.SysProcAttr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
	}
	return cmd
}

// Bind is a host path made visible inside the sandbox.
type Bind struct {
	Src string `json:"src"`
	// Dst is the path inside; default Src.
	Dst string `json:"dst,omitempty"`
	RW  bool   `json:"rw,omitempty"`
}

// Spec is what the init sets up; it travels as JSON on its command line.
type Spec struct {
	// Root is an empty host directory the init mounts the new root on.
	Root  string `json:"root"`
	Binds []Bind `json:"binds,omitempty"`
	// Code, when set, is a host directory that appears read-only at
	// CodeDir: the code itself (rootless mode), or a mount point made shared
	// by the server, so that what it mounts there later propagates into the
	// sandbox (root mode).
	Code string `json:"code,omitempty"`
	// CodeFromStdin says the init reads Code from its stdin, until EOF,
	// once everything else is set up: a rootless spare waits there for its
	// function. The program's stdin is then /dev/null.
	CodeFromStdin bool `json:"code_from_stdin,omitempty"`
	TmpMB         int  `json:"tmp_mb"`
	// SocketDir, when set, is where a 64 KiB tmpfs of the program's own
	// holds its socket; the server reaches it through /proc/PID/root.
	SocketDir string `json:"socket_dir,omitempty"`
	// UID is the uid and gid the program runs as.
	UID int `json:"uid"`
	// UserNS says the init runs in a new user namespace (rootless mode),
	// where UID maps to the server's uid and gid: it keeps the server's
	// supplementary groups, which such a namespace may not drop.
	UserNS bool `json:"user_ns,omitempty"`
	// Zygote says the init sets up a zygote (see Zygote): it runs as uid 0
	// of a user namespace the server made, where the range's uids are
	// mapped; it drops the supplementary groups and every capability but
	// zygoteCaps, makes Dirs, and loads the zygote's filter instead of the
	// instances' one. The program keeps those capabilities of the namespace.
	Zygote bool `json:"zygote,omitempty"`
	// Dirs are empty directories made in the root, where a zygote's
	// instances mount their own /proc and code.
	Dirs []string `json:"dirs,omitempty"`
	// NProc, when positive, is RLIMIT_NPROC.
	NProc int      `json:"nproc,omitempty"`
	Dir   string   `json:"dir,omitempty"`
	Argv  []string `json:"argv"`
	Env   []string `json:"env,omitempty"`
	Probe bool     `json:"probe,omitempty"`
}

// CodeDir is where an instance sees its function's code.
const CodeDir = "/code"

// systemDirs are the read-only runtime files every sandbox sees; those
// missing on the machine are skipped.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"}

// Env is the environment every confined program starts from.
func Env(extraPath ...string) []string {
	path := append(extraPath, "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
	return []string{"PATH=" + strings.Join(path, ":"), "HOME=/tmp", "TMPDIR=/tmp", "LANG=C.UTF-8"}
}

// programBinds makes the program's installation visible: the prefix of
// an interpreter outside the system directories (~/.pyenv/versions/3.11.7
// for .../bin/python3.11).
func programBinds(program string) []Bind {
	real, err := filepath.EvalSymlinks(program)
	if err != nil {
		real = program
	}
	for _, d := range systemDirs {
		if strings.HasPrefix(real, d+"/") && strings.HasPrefix(program, d+"/") {
			return nil
		}
	}
	var binds []Bind
	seen := map[string]bool{}
	for _, p := range []string{program, real} {
		prefix := filepath.Dir(filepath.Dir(p))
		if prefix == "/" || seen[prefix] {
			continue
		}
		seen[prefix] = true
		binds = append(binds, Bind{Src: prefix})
	}
	return binds
}
