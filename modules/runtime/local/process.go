package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
	"sless.kube5s.ru/sless/modules/runtime/wire"
)

// process is one running wrapper: generic until specialized.
type process struct {
	runtime string
	os      osProcess
	pid     int // in the server's pid namespace
	client  *wire.Client
	// done is closed when the process has exited; status, waitErr and oom
	// are then set.
	done    chan struct{}
	status  syscall.WaitStatus
	waitErr error // how it ended is unknown
	oom     bool
	log     *lineLogger
	// cgroup is the process's memory cgroup, nil when memory is limited
	// with RLIMIT_DATA. Set before the process is shared.
	cgroup *memCgroup
	// netCgroup is the cgroup v2 made for the process's network filter on a
	// hybrid machine (see egressCgroups), or nil.
	netCgroup *memCgroup
	// box is the process's sandbox, nil when instances are not confined.
	box *sandbox.Instance
	// ready, when set, is the ready pipe of a process whose wrapper starts
	// only once specialize gave it its code (a rootless spare); the exit
	// watcher closes it.
	ready *os.File
	// specialized, set before the specialize request's answer can be read,
	// is told its outcome (see specialize).
	specialized func(error)
}

// osProcess is an instance's process as the executor reaches it: one it
// started (the wrapper, or the sandbox's init that becomes it) or one a
// zygote forked.
type osProcess interface {
	// signal signals the instance: the process group of one the executor
	// started; the pid namespace's first process of a forked one, where
	// SIGKILL ends every process in the namespace.
	signal(sig syscall.Signal) error
	// wait waits until the process has exited and its output is read, and
	// returns its wait status, or an error when that is unknown.
	wait() (syscall.WaitStatus, error)
}

// started is a process the executor started.
type started struct{ cmd *exec.Cmd }

func (s started) signal(sig syscall.Signal) error { return syscall.Kill(-s.cmd.Process.Pid, sig) }

func (s started) wait() (syscall.WaitStatus, error) {
	awaitExit(s.cmd.Process.Pid)
	err := s.cmd.Wait()
	if s.cmd.ProcessState != nil {
		if ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
			return ws, nil
		}
	}
	return 0, err
}

// awaitExit returns once pid, a child the caller has not waited for, has
// exited, parked on the runtime's poller: Wait's waitid holds an OS thread
// while it blocks, one per running instance. Where the kernel has no
// non-blocking pidfds (before 5.10) it returns at once and Wait blocks.
func awaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// A pidfd is readable once its process exited: the first call waits
	// for that, the second ends the wait.
	polled := false
	rc.Read(func(uintptr) bool {
		done := polled
		polled = true
		return done
	})
}

// forked is a process a zygote forked, whose output a goroutine copies
// until copied is closed.
type forked struct {
	f      *sandbox.Forked
	copied chan struct{}
}

func (f forked) signal(sig syscall.Signal) error { return f.f.Signal(sig) }

func (f forked) wait() (syscall.WaitStatus, error) {
	ws, err := f.f.Status()
	<-f.copied
	return ws, err
}

// launch says where a new process lives.
type launch struct {
	wrapper string // path of the wrapper file
	dir     string // the executor's runtime directory
	id      string // unique among the executor's processes
	box     *sandbox.Instance
	env     []string
	// exited runs once the process has exited and its cgroups and sandbox
	// are gone.
	exited func()
}

// limits are what confines every process's resources.
type limits struct {
	mem    *memoryLimiter
	egress *egressCgroups
}

// startProcess starts a wrapper of runtime p, attaches it to cgroups of its
// own and waits until it is ready (a rootless spare: until specialize).
// Confined, the process is the sandbox's init, which becomes the wrapper:
// its pid is the wrapper's.
func startProcess(ctx context.Context, p runtime.Provider, l launch, lim limits, log *slog.Logger) (*process, error) {
	// Until the exit watcher runs, failing undoes the launch here.
	fail := func(err error) (*process, error) {
		l.box.Release()
		l.exited()
		return nil, err
	}
	interp, args, err := p.Interpreter(ctx)
	if err != nil {
		return fail(err)
	}
	readR, readW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	waitsForCode := l.box != nil && l.box.WaitsForCode()
	defer func() {
		if !waitsForCode {
			readR.Close()
		}
	}()
	lw := newLineLogger(log.With("runtime", p.Name()))
	var cmd *exec.Cmd
	sock := filepath.Join(l.dir, l.id+".sock")
	if l.box == nil {
		cmd = exec.Command(interp, append(args, l.wrapper, "--listen", "unix:"+sock, "--ready-fd", "3")...)
		cmd.Env = l.env
		cmd.Dir = l.dir
		// Own process group: signals to the server's group (a terminal's
		// ^C) do not reach instances; Pdeathsig: instances die with the
		// server.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	} else {
		wrapper := "/sless/" + filepath.Base(l.wrapper)
		cmd = l.box.Command(interp, append(args, wrapper, "--listen", "unix:"+sandbox.SocketPath, "--ready-fd", "3"), l.env,
			[]sandbox.Bind{{Src: l.wrapper, Dst: wrapper}})
	}
	cmd.ExtraFiles = []*os.File{readW}
	cmd.Stdout, cmd.Stderr = lw, lw
	if err := cmd.Start(); err != nil {
		readW.Close()
		return fail(fmt.Errorf("starting %s: %w", interp, err))
	}
	readW.Close()
	dial := wire.UnixDialer(sock)
	if l.box != nil {
		dial = sandbox.Dialer(cmd.Process.Pid, cmd.Process)
	}
	pr := &process{runtime: p.Name(), os: started{cmd}, pid: cmd.Process.Pid, client: wire.NewClient(dial), done: make(chan struct{}),
		log: lw, box: l.box}
	// Attached before the exit watcher starts, so that the watcher removes
	// the cgroups whenever the process ends; by pid, which stays the
	// process's until the watcher has waited for it.
	err = pr.create(l.id, lim)
	if err == nil {
		err = pr.cgroup.enterPid(pr.pid)
	}
	if err == nil {
		err = pr.netCgroup.enterPid(pr.pid)
	}
	if err != nil {
		pr.kill()
		cmd.Wait()
		pr.cgroup.remove()
		pr.netCgroup.remove()
		return fail(err)
	}
	if waitsForCode {
		pr.ready = readR
	}
	pr.watch(l, sock)
	if waitsForCode {
		return pr, nil
	}
	if err := pr.waitReady(ctx, readR); err != nil {
		pr.kill()
		<-pr.done
		return nil, err
	}
	return pr, nil
}

// forkProcess forks a wrapper of runtime p from the zygote z into l.box
// (from z.NewInstance) and waits until it is ready. The process joins its
// cgroups itself, before anything else runs in it.
func forkProcess(ctx context.Context, p runtime.Provider, z *sandbox.Zygote, l launch, lim limits, log *slog.Logger) (*process, error) {
	pr := &process{runtime: p.Name(), done: make(chan struct{}), log: newLineLogger(log.With("runtime", p.Name())), box: l.box}
	fail := func(err error) (*process, error) {
		pr.cgroup.remove()
		pr.netCgroup.remove()
		l.box.Release()
		l.exited()
		return nil, err
	}
	if err := pr.create(l.id, lim); err != nil {
		return fail(err)
	}
	cgroups, err := pr.cgroup.procs()
	if err == nil && pr.netCgroup != nil {
		var net []*os.File
		net, err = pr.netCgroup.procs()
		cgroups = append(cgroups, net...)
	}
	defer closeAll(cgroups)
	if err != nil {
		return fail(err)
	}
	readR, readW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	defer readR.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		readW.Close()
		return fail(err)
	}
	f, err := z.Fork(ctx, l.box, l.env, sandbox.ForkFiles{Stdout: outW, Stderr: outW, Ready: readW, Cgroups: cgroups})
	readW.Close()
	outW.Close()
	if err != nil {
		outR.Close()
		return fail(err)
	}
	copied := make(chan struct{})
	go func() {
		io.Copy(pr.log, outR)
		outR.Close()
		close(copied)
	}()
	pr.os, pr.pid, pr.client = forked{f: f, copied: copied}, f.Pid, wire.NewClient(f.Dialer())
	pr.watch(l, "")
	if err := pr.waitReady(ctx, readR); err != nil {
		pr.kill()
		<-pr.done
		return nil, err
	}
	return pr, nil
}

// create makes the process's cgroups (see memoryLimiter.create and
// egressCgroups.create).
func (pr *process) create(id string, lim limits) error {
	var err error
	if pr.cgroup, err = lim.mem.create(id); err != nil {
		return err
	}
	pr.netCgroup, err = lim.egress.create(id)
	return err
}

// watch starts the exit watcher, which releases what the process held once
// it has exited: its connections, socket (and the rehearsal's directory
// beside it), cgroups and sandbox.
func (pr *process) watch(l launch, sock string) {
	go func() {
		pr.status, pr.waitErr = pr.os.wait()
		if pr.ready != nil {
			pr.ready.Close()
		}
		pr.log.Flush()
		pr.client.Close()
		if sock != "" {
			os.Remove(sock)
			// A wrapper killed while it rehearsed leaves its rehearsal's
			// directory beside the socket (see PROTOCOL.md). RemoveAll
			// follows no symbolic link the function may have put there.
			os.RemoveAll(sock + ".rehearsal")
		}
		pr.oom = pr.cgroup.oomKilled()
		pr.cgroup.remove()
		if pr.netCgroup != nil {
			pr.netCgroup.killAll()
			pr.netCgroup.remove()
		}
		l.box.Release()
		close(pr.done)
		l.exited()
	}()
}

// waitReady waits for the wrapper's "ready" line on the ready pipe.
func (pr *process) waitReady(ctx context.Context, r *os.File) error {
	line := make(chan error, 1)
	go func() {
		buf := make([]byte, 16)
		n, err := io.ReadAtLeast(r, buf, len("ready\n"))
		if err == nil && string(buf[:n]) != "ready\n" {
			err = fmt.Errorf("unexpected %q on the ready pipe", buf[:n])
		}
		line <- err
	}()
	select {
	case err := <-line:
		if err != nil {
			<-pr.done
			return fmt.Errorf("the %s wrapper exited before it was ready (%s): %w", pr.runtime, pr.exitReason(), pr.log.lastOutput(err))
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the %s wrapper was not ready in time: %w", pr.runtime, context.Cause(ctx))
	}
}

// specializeRequest is the body of /_sless/specialize.
type specializeRequest struct {
	CodeDir     string            `json:"code_dir"`
	Handler     string            `json:"handler"`
	Env         map[string]string `json:"env"`
	Function    string            `json:"function"`
	Namespace   string            `json:"namespace"`
	Concurrency int               `json:"concurrency"`
}

// specialize gives the generic process its code, limits its memory and
// sends the request that loads the function's handler, due by ctx's
// deadline, without waiting for the answer: the instance's first
// invocation goes behind it (wire.Client.Send), or pr.client.Await reads
// it. The answer's outcome goes to pr.specialized and fails the first
// invocation's Do or the Await: nil, or an ErrStart error.
func (pr *process) specialize(ctx context.Context, t *runtime.Target, env map[string]string, mem *memoryLimiter) error {
	codeDir := t.Artifact
	if pr.box != nil {
		if err := pr.box.MountCode(t.Artifact); err != nil {
			return runtime.Errorf(runtime.ErrStart, "the function's code could not be made available to the instance", err)
		}
		codeDir = sandbox.CodeDir
	}
	if pr.ready != nil {
		if err := pr.waitReady(ctx, pr.ready); err != nil {
			return runtime.Errorf(runtime.ErrStart, "the instance process could not be started; the server log has the details", err)
		}
	}
	// Limited once the wrapper runs (a waiting rootless init is a larger
	// program) and before the handler loads.
	if err := mem.limit(pr.cgroup, pr.pid, t.MemoryMB, t.Concurrency); err != nil {
		return err
	}
	body, _ := json.Marshal(specializeRequest{CodeDir: codeDir, Handler: t.Handler, Env: env,
		Function: t.Name, Namespace: t.Namespace, Concurrency: t.Concurrency})
	deadline, _ := ctx.Deadline()
	err := pr.client.Send(ctx, "POST", "/_sless/specialize", body, deadline, func(status int, resp []byte, err error) error {
		err = pr.specializeOutcome(t, status, resp, err)
		pr.specialized(err)
		return err
	})
	if err != nil {
		return fmt.Errorf("specializing instance %d: %w", pr.pid, err)
	}
	return nil
}

// specializeOutcome makes the answer to the specialize request (or the
// error reading it) an ErrStart error, or nil when the handler loaded.
func (pr *process) specializeOutcome(t *runtime.Target, status int, resp []byte, err error) error {
	switch {
	case errors.Is(err, runtime.ErrTimeout):
		return runtime.Errorf(runtime.ErrStart, "the handler did not load within the start timeout", err)
	case err != nil:
		return runtime.Errorf(runtime.ErrStart, "the instance process could not be started; the server log has the details",
			fmt.Errorf("reading the answer of instance %d to its specialize request: %w", pr.pid, err))
	case status != 200:
		var e struct{ Error, Type, Logs string }
		json.Unmarshal(resp, &e)
		msg := strings.TrimSpace(e.Type + ": " + e.Error)
		if e.Type == "" {
			msg = fmt.Sprintf("HTTP %d %s", status, bytes.TrimSpace(resp))
		}
		// The message goes to callers and the function's status; the
		// traceback only to the server log.
		pr.log.base().Warn("the handler could not be loaded", "namespace", t.Namespace, "function", t.Name,
			"error", msg, "traceback", e.Logs)
		return runtime.Errorf(runtime.ErrStart, fmt.Sprintf("the handler %q could not be loaded: %s", t.Handler, msg), nil)
	}
	pr.log.setLogger(pr.log.base().With("namespace", t.Namespace, "function", t.Name))
	return nil
}

// exited reports whether the process has exited.
func (pr *process) exited() bool {
	select {
	case <-pr.done:
		return true
	default:
		return false
	}
}

// kill stops the instance's processes at once.
func (pr *process) kill() {
	pr.os.signal(syscall.SIGKILL)
}

// stop asks the process to exit and kills it after grace.
func (pr *process) stop(grace time.Duration) {
	pr.os.signal(syscall.SIGTERM)
	select {
	case <-pr.done:
	case <-time.After(grace):
		pr.kill()
		<-pr.done
	}
}

// exitReason describes how the process ended, for crash messages.
func (pr *process) exitReason() string {
	switch {
	case pr.oom:
		return "killed for using more memory than memory_mb allows"
	case pr.waitErr != nil:
		return pr.waitErr.Error()
	case pr.status.Signaled():
		return "killed by signal " + pr.status.Signal().String()
	}
	return fmt.Sprintf("exit status %d", pr.status.ExitStatus())
}

// lineLogger logs a process's output line by line and remembers the last
// lines for error messages.
type lineLogger struct {
	logger atomic.Pointer[slog.Logger]
	buf    []byte
	last   []string
}

func newLineLogger(l *slog.Logger) *lineLogger {
	lw := &lineLogger{}
	lw.logger.Store(l)
	return lw
}

func (l *lineLogger) base() *slog.Logger         { return l.logger.Load() }
func (l *lineLogger) setLogger(log *slog.Logger) { l.logger.Store(log) }

// Write is called by one goroutine per stream (exec's copiers); stdout and
// stderr share a writer, so exec serializes them.
func (l *lineLogger) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.emit(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 16<<10 {
		l.emit(string(l.buf))
		l.buf = l.buf[:0]
	}
	return len(p), nil
}

// outputReadSize is how much of a process's output one read takes. io.Copy
// would read through a 32 KiB buffer, held for the process's life by the
// copying goroutine: 32 MB at 1,000 instances, for output that is mostly
// none.
const outputReadSize = 2 << 10

// ReadFrom copies r's output into Write (io.Copy, as exec's copiers and
// forkProcess call it, uses it) until r ends.
func (l *lineLogger) ReadFrom(r io.Reader) (int64, error) {
	buf := make([]byte, outputReadSize)
	var total int64
	for {
		n, err := r.Read(buf)
		total += int64(n)
		l.Write(buf[:n])
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// Flush logs an unterminated last line.
func (l *lineLogger) Flush() {
	if len(l.buf) > 0 {
		l.emit(string(l.buf))
		l.buf = nil
	}
}

func (l *lineLogger) emit(line string) {
	l.logger.Load().Info("instance output", "line", line)
	l.last = append(l.last, line)
	if len(l.last) > 5 {
		l.last = l.last[1:]
	}
}

// lastOutput adds the process's last output lines to err.
func (l *lineLogger) lastOutput(err error) error {
	if len(l.last) == 0 {
		return err
	}
	return fmt.Errorf("%w; its last output: %s", err, strings.Join(l.last, " | "))
}
