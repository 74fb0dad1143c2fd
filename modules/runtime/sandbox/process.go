package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"sless.kube5s.ru/sless/internal/tempdir"
)

// Instance is the sandbox of one instance process, kept in a directory of
// the server's (inside its 0700 runtime directory): root/ is where its init
// mounts its root and, in the root mode, code/ is the shared mount point its
// function's code is mounted on.
//
// In the rootless mode the server cannot mount into the instance: its init
// binds the code itself before it pivots. An instance whose code is not
// known at start (a spare) has its init set everything else up and wait, on
// its stdin, for MountCode to name the code; its program starts only then.
type Instance struct {
	sb  *Sandbox
	dir string
	uid int
	// mountPoint is where MountCode mounts the code in the root mode, and
	// ownBind says it is a shared bind of itself that Release undoes too
	// (not for a forked instance, whose mount point is in its zygote's
	// shared directory).
	mountPoint string
	ownBind    bool
	// code is the code of a rootless instance, once known.
	code string
	// codeR and codeW are the pipe a waiting rootless init reads its code's
	// path from, until MountCode.
	codeR, codeW *os.File
	release      func()
}

// socketDir is where an instance's socket lives: a 64 KiB tmpfs of its own
// mount namespace (mode 0700), which it can fill no further and no other
// instance sees.
const socketDir = "/run/sless"

// SocketPath is where an instance's wrapper listens, inside its sandbox;
// the server connects with Dialer.
const SocketPath = socketDir + "/s.sock"

// NewInstance prepares the sandbox of one instance in dir, which must not
// exist. Code is the directory of the function's code when it is known at
// start, else "" (a spare); MountCode gives it the code in either case.
// Release undoes it.
func (s *Sandbox) NewInstance(dir, code string) (*Instance, error) {
	uid, release, err := s.allocUID()
	if err != nil {
		return nil, err
	}
	in := &Instance{sb: s, dir: dir, uid: uid, release: release, mountPoint: filepath.Join(dir, "code"), ownBind: !s.userNS}
	if s.userNS {
		in.code = code
	}
	if err := in.prepare(); err != nil {
		in.Release()
		return nil, fmt.Errorf("preparing an instance sandbox: %w", err)
	}
	return in, nil
}

func (in *Instance) prepare() error {
	for _, d := range []string{in.dir, in.path("root")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	if in.sb.userNS {
		if in.code == "" {
			var err error
			if in.codeR, in.codeW, err = os.Pipe(); err != nil {
				return err
			}
		}
		return nil
	}
	if err := os.Mkdir(in.mountPoint, 0o700); err != nil {
		return err
	}
	// A shared mount point: what MountCode mounts on it later appears in
	// the instance's mount namespace too, whose copy of it is a slave.
	return makeShared(in.mountPoint)
}

// makeShared makes dir a shared mount point: what is mounted on or below it
// later appears in the slave copies other mount namespaces have of it.
func makeShared(dir string) error {
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding the mount point %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("sharing the mount point %s: %w", dir, err)
	}
	return nil
}

func (in *Instance) path(name string) string { return filepath.Join(in.dir, name) }

// Signaler signals a process without ever reaching another one that reuses
// its pid: *os.Process (through a pidfd) and *Forked do.
type Signaler interface {
	Signal(os.Signal) error
}

// Dialer returns the dialer of the socket of the instance whose pid (in the
// server's pid namespace) is pid, signalled through proc: the init the
// caller started and has not waited for yet, or a forked instance. It
// connects through the instance's root, /proc/PID/root, to the socket
// itself: the instance owns its socket directory, and a symlink it put
// there instead would be followed in the server's namespace. It refuses a
// connection made after the process ended, when the pid may name another
// process.
func Dialer(pid int, proc Signaler) func(ctx context.Context) (net.Conn, error) {
	path := fmt.Sprintf("/proc/%d/root%s", pid, SocketPath)
	var d net.Dialer
	return func(ctx context.Context) (net.Conn, error) {
		fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			return nil, fmt.Errorf("connecting to instance %d: its socket is not a socket", pid)
		}
		// The magic link names the inode fstat saw, whatever the path
		// holds now.
		c, err := d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
		if err != nil {
			return nil, err
		}
		// Alive now, so alive when the path was resolved.
		if err := proc.Signal(syscall.Signal(0)); err != nil {
			c.Close()
			return nil, fmt.Errorf("connecting to instance %d: %w", pid, err)
		}
		return c, nil
	}
}

// Command returns the command that runs program with args and env in the
// instance's sandbox, with binds (the wrapper) made visible read-only and a
// socket directory at SocketPath's. Its process is the init: the caller
// attaches it to cgroups and waits for it, and leaves its stdin alone.
func (in *Instance) Command(program string, args, env []string, binds []Bind) *exec.Cmd {
	spec := Spec{
		Root:          in.path("root"),
		Binds:         append(programBinds(program), binds...),
		Code:          in.code,
		CodeFromStdin: in.codeR != nil,
		SocketDir:     socketDir,
		TmpMB:         in.sb.cfg.TmpMB,
		UID:           in.uid,
		Dir:           "/tmp",
		Argv:          append([]string{program}, args...),
		Env:           env,
	}
	if !in.sb.userNS {
		spec.Code = in.mountPoint
	}
	cmd := in.sb.command(spec)
	if in.codeR != nil {
		cmd.Stdin = in.codeR
	}
	return cmd
}

// WaitsForCode reports whether the instance's program starts only once
// MountCode gave it its code (a rootless spare): the caller waits for the
// program to be ready after MountCode, not after starting the command.
func (in *Instance) WaitsForCode() bool { return in.codeR != nil }

// MountCode makes the directory artifact visible, read-only, at CodeDir
// inside the instance. It is a few system calls, fit for the cold start.
// In the rootless mode it hands the path to the waiting init, or checks that
// the code bound at start is artifact.
func (in *Instance) MountCode(artifact string) error {
	if in.sb.userNS {
		return in.handCode(artifact)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, artifact, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("opening the code for the instance: %w", err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("making the instance's code read-only: %w", err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, in.mountPoint, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mounting the code into the instance: %w", err)
	}
	return nil
}

// handCode gives a waiting rootless init the path of its code, once.
func (in *Instance) handCode(artifact string) error {
	if in.codeW == nil {
		if artifact != in.code {
			return fmt.Errorf("the instance was started with the code %s, not %s", filepath.Base(in.code), filepath.Base(artifact))
		}
		return nil
	}
	_, err := io.WriteString(in.codeW, artifact)
	in.closeCodePipe()
	if err != nil {
		return fmt.Errorf("handing the code to the instance: %w", err)
	}
	in.code = artifact
	return nil
}

func (in *Instance) closeCodePipe() {
	if in.codeW != nil {
		in.codeR.Close()
		in.codeW.Close()
		in.codeR, in.codeW = nil, nil
	}
}

// Release unmounts the instance's code, removes its directory and frees its
// uid. It runs once the process has exited; on nil it does nothing.
func (in *Instance) Release() {
	if in == nil {
		return
	}
	in.closeCodePipe()
	if !in.sb.userNS {
		// The code (when mounted) and the mount point's own bind.
		binds := 1
		if in.ownBind {
			binds = 2
		}
		for range binds {
			if err := unix.Unmount(in.mountPoint, unix.MNT_DETACH); err != nil {
				break
			}
		}
	}
	os.RemoveAll(in.dir)
	in.release()
}

// Confine rewrites cmd, a dependency install run in dir (the code being
// built), to run in a sandbox of its own: its own uid (root mode; owning dir
// for the time of the install), dir writable and bound at its own path, the
// system's files and the tool's installation read-only, a private /tmp (also
// its HOME, so that caches are private), and the network of the server. The
// returned release gives dir back to the server's user once cmd has ended.
func (s *Sandbox) Confine(cmd *exec.Cmd, dir string) (release func(), err error) {
	uid, free, err := s.allocUID()
	if err != nil {
		return nil, err
	}
	root, err := tempdir.Make("", "build-")
	if err != nil {
		free()
		return nil, err
	}
	// In the rootless mode the install runs as the server's uid: dir is
	// already its own.
	handOver := !s.userNS
	release = func() {
		if handOver {
			chownTree(dir, os.Geteuid(), os.Getegid())
		}
		os.RemoveAll(root)
		free()
	}
	if handOver {
		if err := chownTree(dir, uid, uid); err != nil {
			release()
			return nil, fmt.Errorf("handing the build directory to the install: %w", err)
		}
	}
	env := Env(filepath.Dir(cmd.Path))
	for _, kv := range cmd.Env {
		if k, _, _ := strings.Cut(kv, "="); k != "PATH" && k != "HOME" && k != "TMPDIR" {
			env = append(env, kv)
		}
	}
	spec := Spec{
		Root:  root,
		Binds: append(programBinds(cmd.Path), Bind{Src: dir, RW: true}),
		TmpMB: s.cfg.BuildTmpMB,
		UID:   uid,
		NProc: s.cfg.BuildProcs,
		Dir:   dir,
		Argv:  append([]string{cmd.Path}, cmd.Args[1:]...),
		Env:   env,
	}
	inner := s.command(spec)
	cmd.Path, cmd.Args, cmd.Env, cmd.Dir = inner.Path, inner.Args, inner.Env, ""
	cmd.SysProcAttr = inner.SysProcAttr
	return release, nil
}

// UnmountUnder detaches every mount below dir, deepest first: the code and
// socket mounts of instances a killed server left behind, which keep dir
// from being removed.
func UnmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for line := range strings.SplitSeq(string(data), "\n") {
		// "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 ..."
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	// Longer paths are deeper; a path mounted twice is unmounted twice.
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		unix.Unmount(p, unix.MNT_DETACH)
	}
}

// chownTree gives dir and everything in it to uid:gid, symlinks included
// (not followed).
func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}
