package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"
)

// Main is the init of a sandbox: it runs with every capability of the new
// namespaces the server started it in (as root, or as the server's uid in a
// new user namespace), sets the sandbox up from the JSON spec in args[0] and
// execs the program. It returns an exit status only when that fails (or
// after a probe).
func Main(args []string) int {
	// Credentials, the parent-death signal and the seccomp filter must all
	// be in place on the thread that execs.
	runtime.LockOSThread()
	var spec Spec
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: sless "+InitCommand+" SPEC (run by the server only)")
		return 2
	}
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox: bad spec:", err)
		return 2
	}
	if err := setup(&spec); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		return 1
	}
	if spec.Probe {
		if err := unix.Mount("none", "/tmp", "tmpfs", 0, ""); !errors.Is(err, unix.EPERM) {
			fmt.Fprintln(os.Stderr, "sandbox: mount(2) was not refused:", err)
			return 1
		}
		return 0
	}
	err := syscall.Exec(spec.Argv[0], spec.Argv, spec.Env)
	fmt.Fprintf(os.Stderr, "sandbox: starting %s: %v\n", spec.Argv[0], err)
	return 127
}

// setup builds the root filesystem, drops privileges and loads the filter.
func setup(spec *Spec) error {
	if len(spec.Argv) == 0 {
		return errors.New("no program")
	}
	// Nothing mounted here reaches the server's namespace; what the server
	// mounts on the code mount point still arrives.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	root := spec.Root
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0755"); err != nil {
		return fmt.Errorf("mounting the root: %w", err)
	}
	// /tmp first: a bound path under /tmp (a build directory) stays
	// visible.
	tmp := fmt.Sprintf("size=%dm,mode=1777", spec.TmpMB)
	if err := mountAt(root, "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmp); err != nil {
		return err
	}
	binds := spec.Binds
	for _, d := range systemDirs {
		binds = append(binds, Bind{Src: d})
	}
	for _, b := range binds {
		if err := bind(root, b); err != nil {
			return err
		}
	}
	for _, d := range spec.Dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if spec.SocketDir != "" {
		opts := fmt.Sprintf("size=64k,nr_inodes=64,mode=0700,uid=%d,gid=%d", spec.UID, spec.UID)
		if err := mountAt(root, spec.SocketDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
			return err
		}
	}
	if err := mountDev(root, tmp); err != nil {
		return err
	}
	if err := mountAt(root, "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	if spec.CodeFromStdin {
		// EOF without a path: the server let the spare go.
		path, err := io.ReadAll(io.LimitReader(os.Stdin, 4096))
		switch {
		case err != nil:
			return fmt.Errorf("reading the code's path: %w", err)
		case len(path) == 0:
			return errors.New("no code was given")
		}
		spec.Code = string(path)
	}
	if spec.Code != "" {
		if err := bind(root, Bind{Src: spec.Code, Dst: CodeDir}); err != nil {
			return err
		}
	}
	if err := pivot(root); err != nil {
		return err
	}
	if spec.CodeFromStdin {
		null, err := unix.Open("/dev/null", unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		if err := unix.Dup3(null, 0, 0); err != nil {
			return err
		}
		unix.Close(null)
	}
	if err := unix.Sethostname([]byte("sless")); err != nil {
		return fmt.Errorf("setting the host name: %w", err)
	}
	return drop(spec)
}

// bind mounts b.Src at b.Dst under root, read-only unless b.RW. A missing
// source is skipped; a symlink (/bin -> usr/bin) is copied as a symlink.
func bind(root string, b Bind) error {
	dst := b.Dst
	if dst == "" {
		dst = b.Src
	}
	target := filepath.Join(root, dst)
	st, err := os.Lstat(b.Src)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	switch {
	case st.Mode()&os.ModeSymlink != 0:
		link, err := os.Readlink(b.Src)
		if err != nil {
			return err
		}
		if _, err := os.Lstat(target); err == nil {
			return nil
		}
		return os.Symlink(link, target)
	case st.IsDir():
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
	default:
		if f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			f.Close()
		}
	}
	if err := unix.Mount(b.Src, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s: %w", dst, err)
	}
	var attr uint64 = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	if !b.RW {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(-1, target, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: attr}); err != nil {
		return fmt.Errorf("restricting %s: %w", dst, err)
	}
	return nil
}

func mountAt(root, dst, fstype string, flags uintptr, data string) error {
	target := filepath.Join(root, dst)
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(fstype, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mounting %s: %w", dst, err)
	}
	return nil
}

// mountDev makes a minimal /dev: the harmless character devices of the
// host, the usual links and a /dev/shm sized like /tmp.
func mountDev(root, shm string) error {
	if err := mountAt(root, "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,mode=0755"); err != nil {
		return err
	}
	for _, d := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		if _, err := os.Stat("/dev/" + d); err != nil {
			continue
		}
		target := filepath.Join(root, "dev", d)
		if f, err := os.Create(target); err == nil {
			f.Close()
		}
		if err := unix.Mount("/dev/"+d, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding /dev/%s: %w", d, err)
		}
	}
	for name, link := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(link, filepath.Join(root, "dev", name)); err != nil {
			return err
		}
	}
	if err := mountAt(root, "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, shm); err != nil {
		return err
	}
	return unix.Mount("", filepath.Join(root, "dev"), "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
}

// pivot makes root the root directory, detaches the old one and makes the
// new root's own tmpfs read-only.
func pivot(root string) error {
	old := filepath.Join(root, ".old")
	if err := os.Mkdir(old, 0o700); err != nil {
		return err
	}
	if err := unix.PivotRoot(root, old); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Unmount("/.old", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the old root: %w", err)
	}
	if err := os.Remove("/.old"); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("making the root read-only: %w", err)
	}
	return nil
}

// drop switches to the spec's uid, sets limits and loads the seccomp filter
// (with no_new_privs).
func drop(spec *Spec) error {
	// What an install writes must be readable by the instances that run it,
	// whatever the server's umask.
	unix.Umask(0o022)
	limits := map[int]uint64{unix.RLIMIT_CORE: 0}
	if spec.NProc > 0 {
		limits[unix.RLIMIT_NPROC] = uint64(spec.NProc)
	}
	for res, v := range limits {
		// Never above the server's own hard limit, which only root may
		// raise.
		var cur unix.Rlimit
		if err := unix.Getrlimit(res, &cur); err == nil && cur.Max < v {
			v = cur.Max
		}
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("setting limit %d: %w", res, err)
		}
	}
	// syscall's credential calls apply to every thread of the process. In
	// a user namespace of the rootless mode the uid and gid are already the
	// only mapped ones.
	if !spec.UserNS {
		if err := syscall.Setgroups(nil); err != nil {
			return fmt.Errorf("dropping groups: %w", err)
		}
	}
	if err := syscall.Setgid(spec.UID); err != nil {
		return fmt.Errorf("switching to gid %d: %w", spec.UID, err)
	}
	if err := syscall.Setuid(spec.UID); err != nil {
		return fmt.Errorf("switching to uid %d: %w", spec.UID, err)
	}
	// The rootless init's capability, which would survive the exec.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	// Changing credentials cleared the parent-death signal.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("setting the parent-death signal: %w", err)
	}
	dir := spec.Dir
	if dir == "" {
		dir = "/"
	}
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("entering %s: %w", dir, err)
	}
	p := policy()
	if spec.Zygote {
		if err := keepOnly(zygoteCaps); err != nil {
			return err
		}
		// The server's binary was exec'd from an inherited descriptor; of
		// those, only the control socket stays.
		unix.CloseOnExec(zygoteExeFD)
		p = zygotePolicy()
	}
	if err := seccomp.LoadFilter(seccomp.Filter{NoNewPrivs: true, Flag: seccomp.FilterFlagTSync, Policy: p}); err != nil {
		return fmt.Errorf("loading the seccomp filter: %w", err)
	}
	return nil
}

// keepOnly empties the bounding set but for caps: the program, exec'd as
// uid 0 of its user namespace, gets those and no other.
func keepOnly(caps []uintptr) error {
	for c := uintptr(0); c < 64; c++ {
		if slices.Contains(caps, c) {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("dropping capability %d: %w", c, err)
		}
	}
	return nil
}
