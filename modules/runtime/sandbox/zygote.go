package sandbox

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoZygote is returned by StartZygote where the sandbox cannot fork
// instances: it is off, or in the rootless mode.
var ErrNoZygote = errors.New("instances are forked from a zygote only in the sandbox's root mode")

// zygoteCaps are the capabilities a zygote keeps, of its own user namespace
// only: an instance it forks unshares namespaces and mounts (CAP_SYS_ADMIN),
// switches to its uid (CAP_SETUID, CAP_SETGID) and empties its bounding set
// (CAP_SETPCAP) before it runs the wrapper.
var zygoteCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_SETPCAP}

// The descriptors a zygote's init starts with: the zygote's end of its
// control socket, and the server's binary, which it was exec'd from.
const (
	zygoteControlFD = 3
	zygoteExeFD     = 4
)

// Paths inside a zygote's sandbox.
const (
	zygoteProgramDir = "/sless"
	zygoteCodesDir   = "/.sless-codes"
	zygoteNewProc    = "/.sless-proc"
)

// File is a program file a zygote runs, written into its directory.
type File struct {
	Name    string
	Content []byte
}

// ZygoteConfig says what a zygote runs.
type ZygoteConfig struct {
	// Dir is made for the zygote: its root's mount point, its instances'
	// code mount points, its programs. Its parent must be traversable by
	// any uid (mode 0711): the zygote's init runs as a uid of the range.
	Dir string
	// Interpreter and Args run Program (the zygote, which imports Wrapper)
	// as `Interpreter Args... Program --wrapper Wrapper --control-fd 3
	// --filter FILTER` (runtimes/python3.11/zygote.py).
	Interpreter string
	Args        []string
	Program     File
	Wrapper     File
	// Env is the zygote's environment, which its instances replace with the
	// one of each fork request.
	Env []string
	// Output gets what the zygote itself prints.
	Output io.Writer
}

// Zygote is a fork server in a sandbox of its own: an interpreter that has
// imported a runtime's wrapper once and forks instances of it that share
// its memory until they write to it (see the package comment for the
// design and its threat model). It accepts requests from its control
// socket, whose only other end the server holds.
//
// Its processes are an init (pid 1 of the zygote's pid namespace, holding
// no capability), which adopts and reaps the instances and reports their
// exits, and the zygote proper, which forks. Instances outlive the zygote
// proper (Retire, or a crash) and die with the init, which dies with the
// server.
type Zygote struct {
	sb    *Sandbox
	dir   string
	codes string
	free  func() // frees the zygote's uid
	cmd   *exec.Cmd
	ctl   *net.UnixConn
	ready chan error // one result of the start
	// done is closed once the init has exited and the directory is gone.
	done chan struct{}

	// forking serializes requests: the zygote proper forks one at a time.
	forking sync.Mutex

	mu       sync.Mutex
	retiring bool               // no new forks; closes when idle
	alive    bool               // the zygote proper runs
	reply    chan forkReply     // the fork in flight, if any
	pending  string             // its id
	forks    map[string]*Forked // live instances by id
	nextID   int
}

// forkReply is the init's answer to a fork request.
type forkReply struct {
	f   *Forked
	err error
}

// zygoteMessage is a message on the control socket, either way.
type zygoteMessage struct {
	Op     string   `json:"op"`
	ID     string   `json:"id,omitempty"`
	Error  string   `json:"error,omitempty"`
	Status *int     `json:"status,omitempty"`
	UID    int      `json:"uid,omitempty"`
	TmpMB  int      `json:"tmp_mb,omitempty"`
	Listen string   `json:"listen,omitempty"`
	Dir    string   `json:"dir,omitempty"`
	Code   string   `json:"code,omitempty"`
	Env    []string `json:"env,omitempty"`
	// Cgroups counts the cgroup.procs files among the descriptors.
	Cgroups int `json:"cgroups,omitempty"`
}

// StartZygote starts a zygote and waits until it can fork. Its memory and
// pids limits are the caller's: attach its init (Pid) to cgroups at once.
func (s *Sandbox) StartZygote(ctx context.Context, cfg ZygoteConfig) (*Zygote, error) {
	if s == nil || s.userNS {
		return nil, ErrNoZygote
	}
	uid, free, err := s.allocUID()
	if err != nil {
		return nil, err
	}
	z := &Zygote{sb: s, dir: cfg.Dir, codes: filepath.Join(cfg.Dir, "codes"), free: free,
		ready: make(chan error, 1), done: make(chan struct{}), forks: map[string]*Forked{}}
	spec, err := z.prepare(cfg, uid)
	if err != nil {
		z.cleanup()
		return nil, fmt.Errorf("preparing a zygote: %w", err)
	}
	if err := z.start(spec, uid, cfg.Output); err != nil {
		z.cleanup()
		return nil, fmt.Errorf("starting a zygote: %w", err)
	}
	select {
	case err = <-z.ready:
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	if err != nil {
		z.Close()
		return nil, fmt.Errorf("starting a zygote: %w", err)
	}
	return z, nil
}

// prepare makes the zygote's directory, owned by its uid (the init runs as
// that uid and must reach it; no other uid may), and returns its init's
// spec.
func (z *Zygote) prepare(cfg ZygoteConfig, uid int) (Spec, error) {
	root, src := filepath.Join(z.dir, "root"), filepath.Join(z.dir, "src")
	for _, d := range []string{z.dir, root, z.codes, src} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return Spec{}, err
		}
		if err := os.Chown(d, uid, uid); err != nil {
			return Spec{}, err
		}
	}
	binds := []Bind{{Src: z.codes, Dst: zygoteCodesDir}}
	for _, f := range []File{cfg.Program, cfg.Wrapper} {
		path := filepath.Join(z.dir, f.Name)
		if err := os.WriteFile(path, f.Content, 0o644); err != nil {
			return Spec{}, err
		}
		binds = append(binds, Bind{Src: path, Dst: zygoteProgramDir + "/" + f.Name})
	}
	// The interpreter's installation may lie where only root passes
	// (~root/.pyenv): the server binds it into the zygote's directory
	// first, where the init reaches it.
	for i, b := range programBinds(cfg.Interpreter) {
		staged := filepath.Join(src, strconv.Itoa(i))
		if err := os.Mkdir(staged, 0o755); err != nil {
			return Spec{}, err
		}
		if err := unix.Mount(b.Src, staged, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return Spec{}, fmt.Errorf("binding %s: %w", b.Src, err)
		}
		if err := unix.Mount("", staged, "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
			return Spec{}, fmt.Errorf("binding %s: %w", b.Src, err)
		}
		binds = append(binds, Bind{Src: staged, Dst: b.Src})
	}
	// What the server mounts below codes/ later reaches the instances.
	if err := makeShared(z.codes); err != nil {
		return Spec{}, err
	}
	filter, err := filterProgram(policy())
	if err != nil {
		return Spec{}, err
	}
	argv := append(append([]string{cfg.Interpreter}, cfg.Args...), zygoteProgramDir+"/"+cfg.Program.Name,
		"--wrapper", zygoteProgramDir+"/"+cfg.Wrapper.Name, "--control-fd", strconv.Itoa(zygoteControlFD),
		"--filter", base64.StdEncoding.EncodeToString(filter))
	return Spec{
		Root:      root,
		Binds:     binds,
		Dirs:      []string{CodeDir, zygoteNewProc},
		TmpMB:     1,
		SocketDir: socketDir,
		Zygote:    true,
		Dir:       "/tmp",
		Argv:      argv,
		Env:       cfg.Env,
	}, nil
}

// start runs the init: uid 0 of a new user namespace that maps it to the
// zygote's uid and the range's other uids to themselves, in new mount,
// pid, IPC and UTS namespaces owned by it.
func (z *Zygote) start(spec Spec, uid int, output io.Writer) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	child := os.NewFile(uintptr(fds[1]), "zygote-control")
	defer child.Close()
	mine := os.NewFile(uintptr(fds[0]), "zygote-control")
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		return err
	}
	z.ctl = c.(*net.UnixConn)
	// The init runs as the zygote's uid, which may not pass the directories
	// that lead to the server's binary: it is exec'd from a descriptor.
	exe, err := os.Open(z.sb.exe)
	if err != nil {
		return err
	}
	defer exe.Close()
	data, _ := json.Marshal(spec)
	maps := zygoteIDMaps(z.sb.cfg.FirstUID, z.sb.cfg.UIDs, uid)
	z.cmd = &exec.Cmd{
		Path:       fmt.Sprintf("/proc/self/fd/%d", zygoteExeFD),
		Args:       []string{z.sb.exe, InitCommand, string(data)},
		Env:        []string{},
		Stdout:     output,
		Stderr:     output,
		ExtraFiles: []*os.File{child, exe},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
			UidMappings:                maps,
			GidMappings:                maps,
			GidMappingsEnableSetgroups: true,
			// Until then the child is the server's uid, which the
			// namespace does not map.
			Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
			Setpgid:    true,
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	if err := z.cmd.Start(); err != nil {
		z.ctl.Close()
		return err
	}
	z.alive = true
	go z.read()
	return nil
}

// zygoteIDMaps maps uid (and gid) 0 of the zygote's user namespace to the
// zygote's own id, and the range's other ids to themselves.
func zygoteIDMaps(first, count, own int) []syscall.SysProcIDMap {
	maps := []syscall.SysProcIDMap{{ContainerID: 0, HostID: own, Size: 1}}
	if n := own - first; n > 0 {
		maps = append(maps, syscall.SysProcIDMap{ContainerID: first, HostID: first, Size: n})
	}
	if n := first + count - own - 1; n > 0 {
		maps = append(maps, syscall.SysProcIDMap{ContainerID: own + 1, HostID: own + 1, Size: n})
	}
	return maps
}

// Pid returns the zygote's init's pid.
func (z *Zygote) Pid() int { return z.cmd.Process.Pid }

// Done is closed once the zygote's init has exited: after Close, or after
// Retire once its instances have exited, or when it failed.
func (z *Zygote) Done() <-chan struct{} { return z.done }

// ErrNotForking is Fork's error when the zygote was retired, or its process
// had ended, before the fork began: the fork did not break it.
var ErrNotForking = errors.New("the zygote is not forking")

// Forking reports whether the zygote can still fork: it has not been
// retired and its zygote process runs.
func (z *Zygote) Forking() bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.alive && !z.retiring
}

// NewInstance prepares the sandbox of an instance that z will fork: its own
// uid and a code mount point in the zygote's shared directory, which
// MountCode mounts the code on. Release undoes it once the instance has
// exited.
func (z *Zygote) NewInstance() (*Instance, error) {
	z.mu.Lock()
	z.nextID++
	id := "i" + strconv.Itoa(z.nextID)
	z.mu.Unlock()
	uid, release, err := z.sb.allocUID()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(z.codes, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		release()
		return nil, fmt.Errorf("preparing an instance sandbox: %w", err)
	}
	return &Instance{sb: z.sb, dir: dir, uid: uid, mountPoint: dir, release: release}, nil
}

// ForkFiles are the files a forked instance gets.
type ForkFiles struct {
	// Stdout and Stderr get the instance's output, Ready its wrapper's
	// ready line (PROTOCOL.md's --ready-fd).
	Stdout, Stderr, Ready *os.File
	// Cgroups are cgroup.procs files, open for writing, of the cgroups the
	// instance joins before it starts: the server opened them, so the
	// kernel checks its credentials, and nothing is charged to the zygote.
	Cgroups []*os.File
}

// Fork forks an instance into in (from NewInstance) with the environment
// env. It returns once the instance runs in its own sandbox; its wrapper
// then writes the ready line. The caller may close files afterwards.
func (z *Zygote) Fork(ctx context.Context, in *Instance, env []string, files ForkFiles) (*Forked, error) {
	z.forking.Lock()
	defer z.forking.Unlock()
	id := filepath.Base(in.dir)
	req, _ := json.Marshal(zygoteMessage{Op: "fork", ID: id, UID: in.uid, TmpMB: z.sb.cfg.TmpMB, Listen: SocketPath,
		Dir: "/tmp", Code: id, Env: env, Cgroups: len(files.Cgroups)})
	fds := []int{int(files.Stdout.Fd()), int(files.Stderr.Fd()), int(files.Ready.Fd())}
	for _, f := range files.Cgroups {
		fds = append(fds, int(f.Fd()))
	}
	reply := make(chan forkReply, 1)
	z.mu.Lock()
	if !z.alive || z.retiring {
		z.mu.Unlock()
		return nil, ErrNotForking
	}
	z.reply, z.pending = reply, id
	z.mu.Unlock()
	if _, _, err := z.ctl.WriteMsgUnix(req, unix.UnixRights(fds...), nil); err != nil {
		z.mu.Lock()
		z.reply, z.pending = nil, ""
		z.mu.Unlock()
		return nil, fmt.Errorf("asking the zygote to fork: %w", err)
	}
	select {
	case r := <-reply:
		return r.f, r.err
	case <-ctx.Done():
	}
	// A zygote that does not answer in time is broken: ending it ends the
	// fork too, whatever stage it reached, before the caller frees what
	// the instance would have used.
	go z.Close()
	r := <-reply
	if r.f != nil {
		r.f.Signal(syscall.SIGKILL)
		r.f.Status()
	}
	return nil, fmt.Errorf("forking an instance: %w", context.Cause(ctx))
}

// Retire stops z from forking: the zygote process exits, and the init once
// no instance of it runs.
func (z *Zygote) Retire() {
	z.mu.Lock()
	defer z.mu.Unlock()
	if !z.retiring {
		z.retiring = true
		z.ctl.Write(mustJSON(zygoteMessage{Op: "retire"}))
	}
	z.closeIfIdleLocked()
}

// Close ends the zygote's init, which ends every instance it forked, and
// waits for that.
func (z *Zygote) Close() {
	z.ctl.Close()
	z.cmd.Process.Kill()
	<-z.done
}

func (z *Zygote) closeIfIdleLocked() {
	if z.retiring && len(z.forks) == 0 && z.pending == "" {
		// End of file: the init exits.
		z.ctl.CloseWrite()
	}
}

// read handles the init's messages until it exits.
func (z *Zygote) read() {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := z.ctl.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			break
		}
		var m zygoteMessage
		fd := -1
		if scms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(scms) == 1 {
			if fds, err := unix.ParseUnixRights(&scms[0]); err == nil && len(fds) == 1 {
				fd = fds[0]
			}
		}
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			if fd >= 0 {
				unix.Close(fd)
			}
			continue
		}
		z.handle(m, fd)
	}
	z.exited()
}

// handle applies one message of the init; pidfd is the descriptor it
// carried, or -1.
func (z *Zygote) handle(m zygoteMessage, pidfd int) {
	z.mu.Lock()
	defer z.mu.Unlock()
	switch m.Op {
	case "ready":
		select {
		case z.ready <- nil:
		default:
		}
	case "forked", "failed":
		reply := z.reply
		if m.ID != z.pending || reply == nil {
			if pidfd >= 0 {
				unix.Close(pidfd)
			}
			return
		}
		z.reply, z.pending = nil, ""
		var r forkReply
		if m.Op == "forked" && pidfd >= 0 {
			r.f, r.err = newForked(pidfd)
			if r.err == nil {
				r.f.z = z
				z.forks[m.ID] = r.f
			}
		} else {
			r.err = fmt.Errorf("the zygote could not fork an instance: %s", m.Error)
			if m.Status != nil {
				r.err = fmt.Errorf("%w (%s)", r.err, describeStatus(syscall.WaitStatus(*m.Status)))
			}
		}
		reply <- r
		z.closeIfIdleLocked()
	case "exited":
		if f := z.forks[m.ID]; f != nil && m.Status != nil {
			delete(z.forks, m.ID)
			f.exit(syscall.WaitStatus(*m.Status), nil)
		}
		z.closeIfIdleLocked()
	case "zygote-exited":
		if !z.alive {
			return
		}
		z.alive = false
		err := errors.New("the zygote exited before it could fork")
		if m.Status != nil {
			err = fmt.Errorf("%w (%s)", err, describeStatus(syscall.WaitStatus(*m.Status)))
		}
		select {
		case z.ready <- err:
		default:
		}
		// Its instances keep running; the init ends once they have.
		z.retiring = true
		z.closeIfIdleLocked()
	}
}

// exited ends what is left once the init has exited: the kernel has ended
// every instance with it.
func (z *Zygote) exited() {
	z.cmd.Wait()
	z.mu.Lock()
	forks := z.forks
	z.forks, z.alive = map[string]*Forked{}, false
	if z.reply != nil {
		z.reply <- forkReply{err: errors.New("the zygote's init exited")}
		z.reply, z.pending = nil, ""
	}
	z.mu.Unlock()
	select {
	case z.ready <- fmt.Errorf("the zygote's init exited (%s)", describeStatus(z.cmd.ProcessState.Sys().(syscall.WaitStatus))):
	default:
	}
	for _, f := range forks {
		f.exit(0, errors.New("its zygote's init exited"))
	}
	z.ctl.Close()
	z.cleanup()
	close(z.done)
}

// cleanup unmounts and removes the zygote's directory and frees its uid.
func (z *Zygote) cleanup() {
	UnmountUnder(z.dir)
	os.RemoveAll(z.dir)
	z.free()
}

func mustJSON(m zygoteMessage) []byte {
	data, _ := json.Marshal(m)
	return data
}

// describeStatus says how a process ended.
func describeStatus(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "killed by signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}

// Forked is an instance a zygote forked: pid 1 of its own pid namespace,
// the child of the zygote's init, which reports its exit.
type Forked struct {
	// Pid is its pid in the server's pid namespace.
	Pid int
	z   *Zygote

	mu     sync.Mutex
	pidfd  int // -1 once it has exited
	done   chan struct{}
	status syscall.WaitStatus
	err    error
}

// newForked takes over pidfd, the init's pidfd of a new instance.
func newForked(pidfd int) (*Forked, error) {
	pid, err := pidOf(pidfd)
	if err != nil {
		unix.Close(pidfd)
		return nil, err
	}
	return &Forked{Pid: pid, pidfd: pidfd, done: make(chan struct{})}, nil
}

// pidOf reads the pid a pidfd refers to, in the server's pid namespace.
func pidOf(pidfd int) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", pidfd))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Pid:"); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || pid <= 0 {
				return 0, errors.New("the forked instance has exited")
			}
			return pid, nil
		}
	}
	return 0, errors.New("the kernel does not name a pidfd's process")
}

// Signal signals the instance (SIGKILL ends everything in its pid
// namespace); after its exit it returns os.ErrProcessDone.
func (f *Forked) Signal(sig os.Signal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pidfd < 0 {
		return os.ErrProcessDone
	}
	return unix.PidfdSendSignal(f.pidfd, sig.(syscall.Signal), nil, 0)
}

// Done is closed once the instance has exited.
func (f *Forked) Done() <-chan struct{} { return f.done }

// Status returns how the instance ended, once Done is closed: its wait
// status, or an error when that is unknown.
func (f *Forked) Status() (syscall.WaitStatus, error) {
	<-f.done
	return f.status, f.err
}

// exit records the instance's end. With an unknown status (its init
// exited), it first waits for the kernel to end it.
func (f *Forked) exit(ws syscall.WaitStatus, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		fds := []unix.PollFd{{Fd: int32(f.pidfd), Events: unix.POLLIN}}
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if n, _ := unix.Poll(fds, 100); n > 0 {
				break
			}
		}
	}
	unix.Close(f.pidfd)
	f.pidfd = -1
	f.status, f.err = ws, err
	close(f.done)
}

// Dialer returns the dialer of the instance's socket (see Dialer).
func (f *Forked) Dialer() func(ctx context.Context) (net.Conn, error) {
	return Dialer(f.Pid, f)
}
