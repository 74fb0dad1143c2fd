// Package sandbox confines the processes that run user code in the embedded
// mode: function instances and dependency installs (npm install scripts, pip's
// setup.py).
//
// A confined process is started as `sless sandbox-init SPEC`, a re-exec of
// the server's own binary in new mount, pid, IPC and UTS namespaces. The init
// side (Main) builds a root filesystem of its own in a tmpfs: the system's
// runtime files (/usr, /etc, the interpreter's prefix) read-only, the paths
// the caller binds, a size-limited /tmp, a /proc of the new pid namespace and
// a minimal /dev. It pivots into it, switches to an unprivileged uid of its
// own, sets no_new_privs, loads a seccomp filter and execs the program, which
// is pid 1 of its namespace: when it ends, the kernel kills every process it
// started.
//
// Mount namespaces were chosen over Landlock (ABI 7 on the reference kernel)
// because they hide what Landlock can only refuse (the server's /proc, the
// data directory's layout) and give each process its own /proc and /tmp;
// Landlock cannot replace the pid namespace or a private tmpfs.
//
// The sandbox needs root (to switch uids and mount in the server's namespace,
// which is how a pre-started instance gets its function's code at specialize
// time). Without root, "auto" turns it off and says so, "require" refuses.
package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	// confined processes, one per process; defaults 200000 and 65536.
	FirstUID, UIDs int
	// TmpMB is the size of an instance's /tmp (and /dev/shm); default 64.
	TmpMB int
	// BuildTmpMB is the size of a dependency install's /tmp, where pip and
	// npm unpack and cache packages; default 1024.
	BuildTmpMB int
	// BuildProcs limits the processes (threads included) of a dependency
	// install (RLIMIT_NPROC of its own uid); default 512.
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
	sb = &Sandbox{cfg: cfg, used: map[int]bool{}}
	if err := sb.probe(); err != nil {
		if cfg.Mode == ModeRequire {
			return nil, "", fmt.Errorf("the sandbox is required but unavailable: %w", err)
		}
		return nil, err.Error(), nil
	}
	return sb, "", nil
}

// Describe lists the protections in force, for the start-up log.
func (s *Sandbox) Describe() string {
	if s == nil {
		return "none"
	}
	return fmt.Sprintf("own uid per process (%d-%d), mount+pid+ipc+uts namespaces, read-only code and system files, "+
		"private /tmp (%d MiB), no_new_privs, seccomp filter, process tree killed with its init",
		s.cfg.FirstUID, s.cfg.FirstUID+s.cfg.UIDs-1, s.cfg.TmpMB)
}

// probe starts the init in probe mode: it sets everything up as for a real
// process, checks that the seccomp filter refuses mount(2), and exits.
func (s *Sandbox) probe() error {
	if !handlesInit {
		return errors.New("this binary does not run " + InitCommand)
	}
	if os.Geteuid() != 0 {
		return errors.New("the server does not run as root (needed to switch uids and mount code into instances)")
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
	cmd := s.command(Spec{Root: dir, UID: uid, TmpMB: 1, Argv: []string{"probe"}, Probe: true})
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("the sandbox test process failed (%v): %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ErrNoUID is returned when every uid of the range is in use.
var ErrNoUID = errors.New("every uid of the sandbox range is in use; widen --sandbox-uids")

// allocUID returns a free uid of the range and the func that frees it, or
// ErrNoUID: two process trees never share a uid.
func (s *Sandbox) allocUID() (int, func(), error) {
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
	// Code, when set, is a host mount point (made shared by the server)
	// that appears read-only at CodeDir: what the server mounts there
	// later propagates into the sandbox.
	Code  string `json:"code,omitempty"`
	TmpMB int    `json:"tmp_mb"`
	UID   int    `json:"uid"`
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
