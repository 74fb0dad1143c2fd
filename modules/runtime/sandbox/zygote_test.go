package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/runtime/python"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
	"sless.kube5s.ru/sless/modules/runtime/wire"
)

// newZygote starts a python zygote in a sandbox of the root mode.
func newZygote(t *testing.T) (*sandbox.Sandbox, *sandbox.Zygote) {
	t.Helper()
	sb := newSandbox(t)
	if sb.Rootless() {
		t.Skip("instances are forked only in the root mode")
	}
	py := python.New()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	interp, args, err := py.Interpreter(ctx)
	if err != nil {
		testenv.Unavailable(t, "no python: %v", err)
	}
	// The zygote's init runs as a uid of the range: its directory's parent
	// must let it pass.
	parent, err := os.MkdirTemp("", "sless-zygote-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o711); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	zname, zsrc := py.Zygote()
	wname, wsrc := py.Wrapper()
	z, err := sb.StartZygote(ctx, sandbox.ZygoteConfig{Dir: filepath.Join(parent, "z"), Interpreter: interp, Args: args,
		Program: sandbox.File{Name: zname, Content: zsrc}, Wrapper: sandbox.File{Name: wname, Content: wsrc},
		Env: sandbox.Env(), Output: out})
	if err != nil {
		t.Fatalf("starting the zygote: %v; its output: %s", err, out.String())
	}
	t.Cleanup(func() {
		z.Close()
		if t.Failed() {
			t.Logf("the zygote's output: %s", out.String())
		}
	})
	return sb, z
}

// envMap turns KEY=VALUE pairs into a map.
func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// syncBuffer is a bytes.Buffer that processes may write to concurrently.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// forked is an instance a test forked and specialized.
type forked struct {
	f      *sandbox.Forked
	box    *sandbox.Instance
	out    *syncBuffer
	client *wire.Client
}

// fork forks an instance of z, gives it code (a directory with handler.py)
// and specializes it with env.
func fork(t *testing.T, z *sandbox.Zygote, code string, env map[string]string) *forked {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	box, err := z.NewInstance()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer readyR.Close()
	f, err := z.Fork(ctx, box, sandbox.Env(), sandbox.ForkFiles{Stdout: outW, Stderr: outW, Ready: readyW})
	outW.Close()
	readyW.Close()
	if err != nil {
		box.Release()
		outR.Close()
		t.Fatalf("Fork: %v", err)
	}
	in := &forked{f: f, box: box, out: &syncBuffer{}, client: wire.NewClient(f.Dialer())}
	copied := make(chan struct{})
	go func() { io.Copy(in.out, outR); outR.Close(); close(copied) }()
	t.Cleanup(func() {
		in.client.Close()
		f.Signal(syscall.SIGKILL)
		f.Status()
		<-copied
		box.Release()
		if t.Failed() {
			t.Logf("instance %d's output: %s", f.Pid, in.out.String())
		}
	})
	line, err := bufio.NewReader(readyR).ReadString('\n')
	if line != "ready\n" {
		f.Status()
		<-copied
		t.Fatalf("ready line: %q, %v; output: %s", line, err, in.out.String())
	}
	if err := box.MountCode(code); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"code_dir": sandbox.CodeDir, "handler": "handler.handle", "env": env})
	status, resp, err := in.client.Call(ctx, "POST", "/_sless/specialize", body)
	if err != nil || status != 200 {
		t.Fatalf("specialize: %d %s %v", status, resp, err)
	}
	return in
}

// invoke calls the instance with body and returns the answer's status and
// body.
func (in *forked) invoke(t *testing.T, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	status, resp, err := in.client.Call(ctx, "POST", "/", []byte(body))
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	return status, string(resp)
}

// probeHandler runs {"sh": script} with /bin/sh and returns its output, or
// runs {"py": code} and returns the value the code leaves in result.
const probeHandler = `import subprocess
def handle(event, context):
    if "sh" in event:
        p = subprocess.run(["/bin/sh", "-c", event["sh"]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return p.stdout.decode()
    scope = {"event": event}
    exec(event["py"], scope)
    return scope.get("result")
`

// sh runs script in the instance's probe handler and returns its output.
func (in *forked) sh(t *testing.T, script string) string {
	t.Helper()
	var out string
	in.probe(t, map[string]any{"sh": script}, &out)
	return out
}

// py runs code in the instance's probe handler and decodes its result into
// v.
func (in *forked) py(t *testing.T, code string, args map[string]any, v any) {
	t.Helper()
	ev := map[string]any{"py": code}
	for k, a := range args {
		ev[k] = a
	}
	in.probe(t, ev, v)
}

func (in *forked) probe(t *testing.T, event map[string]any, v any) {
	t.Helper()
	ev, _ := json.Marshal(event)
	status, body := in.invoke(t, string(ev))
	if status != 200 || json.Unmarshal([]byte(body), v) != nil {
		t.Fatalf("probe %s: %d %s", ev, status, body)
	}
}

// A forked instance is confined as one the init starts, and holds nothing
// of its zygote's: no descriptor, no capability, no mount, no process.
func TestForkedInstanceSeesOnlyItsOwnWorld(t *testing.T) {
	_, z := newZygote(t)
	in := fork(t, z, writeCode(t, probeHandler), envMap(sandbox.Env()))
	cases := append(confinementCases(hostSecret(t)),
		confinementCase{"has an empty bounding set", "grep CapBnd /proc/self/status | tr -d ' \\t'", "CapBnd:0000000000000000"},
		confinementCase{"has one /proc, of its own pid namespace", "grep -c ' - proc ' /proc/self/mountinfo; readlink /proc/self/ns/pid | grep -c pid", "1\n1"},
		confinementCase{"sees no other instance's code mount point", "find /.sless-codes /.sless-proc -mindepth 1 | wc -l", "0"},
		confinementCase{"has an empty environment but the documented one", "env | sort | tr '\\n' ' '",
			"HOME=/tmp LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PWD=/code TMPDIR=/tmp"})
	checkConfinement(t, cases, in.sh)

	t.Run("is pid 1 of its own pid namespace, which holds its processes only", func(t *testing.T) {
		var got struct {
			Pid  int
			Uids []int
		}
		in.py(t, `import os
uids = set()
for p in os.listdir("/proc"):
    if p.isdigit():
        with open("/proc/%s/status" % p) as f:
            uids.update(int(l.split()[1]) for l in f if l.startswith("Uid:"))
result = {"pid": os.getpid(), "uids": sorted(uids)}`, nil, &got)
		if got.Pid != 1 || len(got.Uids) != 1 || got.Uids[0] == 0 {
			t.Errorf("pid %d, uids of the processes it sees %v; want pid 1 and its own uid only", got.Pid, got.Uids)
		}
	})
	t.Run("holds no descriptor of the zygote's", func(t *testing.T) {
		var got []string
		in.py(t, `import os, socket
result = []
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink("/proc/self/fd/" + fd)
    except OSError:
        continue
    if "pidfd" in target:
        result.append(fd + ": " + target)
    try:
        s = socket.socket(fileno=os.dup(int(fd)))
    except OSError:
        continue
    if s.type == socket.SOCK_SEQPACKET:
        result.append(fd + ": a SEQPACKET socket")
    s.close()`, nil, &got)
		if len(got) > 0 {
			t.Errorf("the instance holds %v", got)
		}
	})
}

// zygotePids returns the pids of z's init and of its zygote process, which
// is the init's child that is not one of the instances.
func zygotePids(t *testing.T, z *sandbox.Zygote, instances ...*forked) (initPid, zygotePid int) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", z.Pid(), z.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	for f := range strings.FieldsSeq(string(data)) {
		pid, _ := strconv.Atoi(f)
		if !slices.ContainsFunc(instances, func(in *forked) bool { return in.f.Pid == pid }) {
			zygotePid = pid
		}
	}
	if zygotePid == 0 {
		t.Fatalf("the zygote's init %d has no child but the instances (%s)", z.Pid(), data)
	}
	return z.Pid(), zygotePid
}

// status returns the fields of /proc/PID/status.
func status(t *testing.T, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for line := range strings.Lines(string(data)) {
		k, v, _ := strings.Cut(line, ":")
		fields[k] = strings.TrimSpace(v)
	}
	return fields
}

// uidOf returns the real uid of pid.
func uidOf(t *testing.T, pid int) int {
	t.Helper()
	uid, _ := strconv.Atoi(strings.Fields(status(t, pid)["Uid"])[0])
	return uid
}

// An instance cannot reach its zygote, the zygote's init or a sibling: not
// by their pids, not through /proc, not by signalling everything it may,
// not through their sockets or memory; and they keep working afterwards.
func TestForkedInstanceCannotReachItsZygoteOrSiblings(t *testing.T) {
	_, z := newZygote(t)
	code := writeCode(t, probeHandler)
	attacker, sibling := fork(t, z, code, envMap(sandbox.Env())), fork(t, z, code, envMap(sandbox.Env()))
	initPid, zygotePid := zygotePids(t, z, attacker, sibling)
	targets := map[string]int{"the zygote's init": initPid, "the zygote": zygotePid, "a sibling": sibling.f.Pid}

	uids := map[int]string{}
	for what, pid := range map[string]int{"the zygote": zygotePid, "the attacker": attacker.f.Pid, "the sibling": sibling.f.Pid} {
		uid := uidOf(t, pid)
		if other, ok := uids[uid]; ok || uid == 0 {
			t.Errorf("%s runs as uid %d, as %s; want a uid of its own", what, uid, other)
		}
		uids[uid] = what
	}

	pids := []int{}
	for _, pid := range targets {
		pids = append(pids, pid)
	}
	var got map[string]string
	attacker.py(t, `import ctypes, errno, os, signal, socket
libc = ctypes.CDLL(None, use_errno=True)
result = {}
def attempt(name, fn):
    try:
        fn()
        result[name] = "succeeded"
    except OSError as e:
        result[name] = "refused: %s" % e
for pid in event["pids"]:
    attempt("signal %d" % pid, lambda: os.kill(pid, signal.SIGKILL))
    attempt("pidfd of %d" % pid, lambda: os.pidfd_open(pid))
    attempt("memory of %d" % pid, lambda: open("/proc/%d/mem" % pid, "rb"))
    attempt("root of %d" % pid, lambda: os.listdir("/proc/%d/root/" % pid))
    attempt("socket of %d" % pid, lambda: socket.socket(socket.AF_UNIX).connect("/proc/%d/root/run/sless/s.sock" % pid))
    buf = ctypes.create_string_buffer(8)
    iov = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 8)
    n = libc.process_vm_readv(pid, iov, 1, iov, 1, 0)
    result["read the memory of %d" % pid] = "succeeded" if n >= 0 else "refused: errno %d" % ctypes.get_errno()
    attempt("ptrace %d" % pid, lambda: (_ for _ in ()).throw(OSError(ctypes.get_errno(), "ptrace")) if libc.ptrace(16, pid, None, None) != 0 else None)
# Everything this process may signal: its own pid namespace only.
attempt("signal every process it may", lambda: os.kill(-1, signal.SIGKILL))`, map[string]any{"pids": pids}, &got)
	for probe, res := range got {
		t.Logf("%s: %s", probe, res)
		if probe != "signal every process it may" && !strings.HasPrefix(res, "refused") {
			t.Errorf("%s: %s", probe, res)
		}
	}
	if len(got) != 7*len(pids)+1 {
		t.Errorf("got %d results, want %d: the probe did not run every attack", len(got), 7*len(pids)+1)
	}
	for what, pid := range targets {
		if err := syscall.Kill(pid, 0); err != nil {
			t.Errorf("%s (%d) after the attacks: %v", what, pid, err)
		}
	}
	if out := sibling.sh(t, "echo alive"); out != "alive\n" {
		t.Errorf("the sibling after the attacks: %q", out)
	}
	fork(t, z, code, nil)
}

// The zygote and its init run as a uid of the range of their own, in a user
// namespace of their own, with no_new_privs and a filter; the init holds no
// capability, the zygote those its children need to confine themselves,
// of its own user namespace only.
func TestZygoteHoldsOnlyWhatItNeeds(t *testing.T) {
	_, z := newZygote(t)
	in := fork(t, z, writeCode(t, probeHandler), nil)
	initPid, zygotePid := zygotePids(t, z, in)
	want := map[string]map[string]string{
		"the init": {"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapBnd": "0000000000000000"},
		// CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID, CAP_SETPCAP.
		"the zygote": {"CapEff": capMask(21, 7, 6, 8), "CapPrm": capMask(21, 7, 6, 8), "CapBnd": capMask(21, 7, 6, 8)},
	}
	serverNS, err := os.Readlink("/proc/self/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	for what, pid := range map[string]int{"the init": initPid, "the zygote": zygotePid} {
		st := status(t, pid)
		for k, v := range want[what] {
			if st[k] != v {
				t.Errorf("%s: %s %s, want %s", what, k, st[k], v)
			}
		}
		for k, v := range map[string]string{"NoNewPrivs": "1", "Seccomp": "2", "CapAmb": "0000000000000000", "Groups": ""} {
			if st[k] != v {
				t.Errorf("%s: %s %q, want %q", what, k, st[k], v)
			}
		}
		if uid := uidOf(t, pid); uid < 200000 || uid >= 200000+65536 {
			t.Errorf("%s runs as uid %d, want one of the sandbox's range", what, uid)
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid)); err != nil || ns == serverNS {
			t.Errorf("%s's user namespace %s (%v) is the server's %s", what, ns, err, serverNS)
		}
	}
}

// capMask is the /proc status mask of the capabilities caps.
func capMask(caps ...uint) string {
	var m uint64
	for _, c := range caps {
		m |= 1 << c
	}
	return fmt.Sprintf("%016x", m)
}

// Instances outlive their zygote: when the zygote process dies, they keep
// serving, the zygote forks no more, and its init ends once they have.
func TestForkedInstanceOutlivesItsZygote(t *testing.T) {
	_, z := newZygote(t)
	in := fork(t, z, writeCode(t, probeHandler), nil)
	_, zygotePid := zygotePids(t, z, in)
	if err := syscall.Kill(zygotePid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the zygote reported dead", func() bool { return !z.Forking() })
	if out := in.sh(t, "echo alive"); out != "alive\n" {
		t.Errorf("the instance after its zygote died: %q", out)
	}
	box, err := z.NewInstance()
	if err != nil {
		t.Fatal(err)
	}
	defer box.Release()
	if _, err := z.Fork(context.Background(), box, nil, sandbox.ForkFiles{Stdout: os.Stderr, Stderr: os.Stderr, Ready: os.Stderr}); !errors.Is(err, sandbox.ErrNotForking) {
		t.Errorf("Fork of a dead zygote: %v; want ErrNotForking", err)
	}
	select {
	case <-z.Done():
		t.Fatal("the init ended while an instance ran")
	default:
	}
	in.f.Signal(syscall.SIGKILL)
	select {
	case <-z.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the init did not end after its last instance")
	}
}

// The init ends every instance with it (and it ends with the server, its
// parent): Close ends the instances and their processes.
func TestForkedInstanceEndsWithTheInit(t *testing.T) {
	_, z := newZygote(t)
	in := fork(t, z, writeCode(t, probeHandler), nil)
	marker := fmt.Sprintf("7%d.%d", os.Getpid()%1000, time.Now().UnixNano()%1000000)
	in.py(t, `import subprocess
subprocess.Popen(["/bin/sleep", event["marker"]], start_new_session=True)
result = "started"`, map[string]any{"marker": marker}, new(string))
	testenv.Eventually(t, 30*time.Second, "the instance's sleep running", func() bool { return len(pidsWith(marker)) > 0 })
	z.Close()
	if _, err := in.f.Status(); err == nil {
		t.Error("the instance has an exit status after its init ended; want an error saying why it is unknown")
	}
	if pids := pidsWith(marker); len(pids) > 0 {
		t.Errorf("processes %v of the instance outlived its init", pids)
	}
}

// The zygote's init reports how each instance ended.
func TestForkedInstanceExitStatus(t *testing.T) {
	_, z := newZygote(t)
	code := writeCode(t, probeHandler)
	for _, tt := range []struct {
		name string
		end  func(in *forked)
		want string
	}{
		{"exit status", func(in *forked) {
			in.client.Call(context.Background(), "POST", "/", []byte(`{"py": "import os; os._exit(3)"}`))
		}, "exit status 3"},
		{"signal", func(in *forked) { in.f.Signal(syscall.SIGKILL) }, "killed by signal killed"},
		{"SIGTERM ends the wrapper with status 0", func(in *forked) { in.f.Signal(syscall.SIGTERM) }, "exit status 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := fork(t, z, code, nil)
			tt.end(in)
			ws, err := in.f.Status()
			got := fmt.Sprintf("exit status %d", ws.ExitStatus())
			if ws.Signaled() {
				got = "killed by signal " + ws.Signal().String()
			}
			if err != nil || got != tt.want {
				t.Errorf("got %s (%v), want %s", got, err, tt.want)
			}
		})
	}
}

// pidsWith returns the pids whose command line has the argument arg.
func pidsWith(arg string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if pid, perr := strconv.Atoi(e.Name()); perr == nil && err == nil && strings.Contains(string(cmdline), "\x00"+arg+"\x00") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// A zygote forks instances only as uids of the range that are not its own:
// never as its own root (the zygote's uid on the host), nor as a uid its
// user namespace does not map.
func TestZygoteRefusesToForkAsItself(t *testing.T) {
	_, z := newZygote(t)
	for _, uid := range []int{0, 1000, 200000 + 65536} {
		t.Run(strconv.Itoa(uid), func(t *testing.T) {
			box, err := z.NewInstance()
			if err != nil {
				t.Fatal(err)
			}
			defer box.Release()
			sandbox.SetUID(box, uid)
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			f, err := z.Fork(context.Background(), box, nil, sandbox.ForkFiles{Stdout: w, Stderr: w, Ready: w})
			if err == nil {
				f.Signal(syscall.SIGKILL)
				t.Fatalf("the zygote forked an instance as uid %d", uid)
			}
			if !strings.Contains(err.Error(), "refusing to fork an instance as uid") {
				t.Errorf("Fork: %v; want the zygote's refusal", err)
			}
		})
	}
	fork(t, z, writeCode(t, probeHandler), nil)
}
