package local_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/meta"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/local"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
)

// newForkingExecutor returns an executor that forks python instances from
// zygotes: the sandbox's root mode, with memory and pids cgroups.
func newForkingExecutor(t *testing.T, cfg local.Config) *local.Executor {
	t.Helper()
	sb, reason, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeAuto})
	if err != nil {
		t.Fatal(err)
	}
	if sb == nil || sb.Rootless() {
		t.Skipf("instances are forked only in the sandbox's root mode (%s)", reason)
	}
	cfg.Sandbox, cfg.Zygotes = sb, true
	e := newExecutor(t, cfg)
	if !local.Forks(e) {
		t.Skip("instances are forked only with memory and pids cgroups")
	}
	return e
}

// invokeIn acquires function ns/name, sends body and releases.
func invokeIn(t *testing.T, e *local.Executor, ns, name, body string) response {
	t.Helper()
	lease, err := e.Acquire(context.Background(), meta.Key{Namespace: ns, Name: name})
	if err != nil {
		return response{err: err}
	}
	defer lease.Release()
	return send(lease, body)
}

// send sends body to the instance of lease, which it keeps.
func send(lease runtime.Lease, body string) response {
	req := &http.Request{Method: "POST", URL: &url.URL{Path: "/"}, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
	var out runtime.ResponseBuffer
	res, err := lease.Do(context.Background(), &runtime.Invocation{ID: "inv-1", Request: req, Path: "/",
		Deadline: time.Now().Add(lease.Target().Timeout), Trigger: []byte(`{"kind":"http"}`)}, &out)
	return response{lease: lease, result: res, body: out.Body.String(), err: err}
}

// deployIn deploys a python function ns/name with handler.py.
func deployIn(t *testing.T, e *local.Executor, ns, name, handler string, edit ...func(*runtime.Target)) {
	t.Helper()
	tg := target(name, "python3.11", code(t, map[string]string{"handler.py": handler}))
	tg.Namespace = ns
	for _, f := range edit {
		f(&tg)
	}
	if ro, err := e.Deploy(context.Background(), tg); err != nil || !ro.Ready {
		t.Fatalf("Deploy %s/%s: %+v, %v", ns, name, ro, err)
	}
}

// parentOf returns the parent of pid.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// zygoteOf waits until a zygote forks ns's python instances and returns its
// init's pid.
func zygoteOf(t *testing.T, e *local.Executor, ns string) int {
	t.Helper()
	var pid int
	testenv.Eventually(t, 60*time.Second, "the zygote of "+ns+" running", func() bool {
		pid = local.ZygotePid(e, "python3.11", ns)
		return pid != 0
	})
	return pid
}

// forkedProbe reports what a forked instance sees of itself.
const forkedProbe = `import os
def handle(event, context):
    try:
        open("/code/handler.py", "a").close()
        code = "writable"
    except OSError:
        code = "read-only"
    return [os.getuid(), os.getcwd(), code, os.environ.get("SLESS_FUNCTION"), os.getpid()]
`

// A namespace's python instances are forked from its own zygote, once it
// runs (the first cold start starts it), confined as the others: an
// unprivileged uid, the code read-only at /code, the function's env.
// Another namespace gets a zygote of its own.
func TestForkedInstances(t *testing.T) {
	e := newForkingExecutor(t, local.Config{Spares: 1})
	deployIn(t, e, "a", "first", forkedProbe)
	if r := invokeIn(t, e, "a", "first", "{}"); r.err != nil || r.result.StatusCode != 200 {
		t.Fatalf("first: %+v", r)
	}
	za := zygoteOf(t, e, "a")
	for _, tt := range []struct{ ns, name string }{{"a", "second"}, {"b", "third"}, {"b", "fourth"}} {
		t.Run(tt.ns+"/"+tt.name, func(t *testing.T) {
			deployIn(t, e, tt.ns, tt.name, forkedProbe)
			if tt.name == "fourth" {
				zygoteOf(t, e, tt.ns)
			}
			r := invokeIn(t, e, tt.ns, tt.name, "{}")
			var got []any
			if r.err != nil || json.Unmarshal([]byte(r.body), &got) != nil || len(got) != 5 || got[0] == 0.0 ||
				got[1] != "/code" || got[2] != "read-only" || got[3] != tt.name || got[4] != 1.0 {
				t.Fatalf("got %s (%v); want an unprivileged uid, /code read-only, the function's env, pid 1", r.body, r.err)
			}
			pids := local.InstancePids(e, tt.ns, tt.name)
			if len(pids) != 1 {
				t.Fatalf("instances %v, want one", pids)
			}
			parent, zb := parentOf(t, pids[0]), local.ZygotePid(e, "python3.11", "b")
			switch {
			case tt.ns == "a" && parent != za:
				t.Errorf("the instance's parent is %d, want a's zygote's init %d", parent, za)
			case tt.name == "fourth" && (parent != zb || zb == za):
				t.Errorf("the instance's parent is %d, want b's zygote's init %d, not a's %d", parent, zb, za)
			case tt.name == "third" && parent == za:
				t.Errorf("b's first instance was forked by a's zygote")
			}
		})
	}
}

// A forked instance is in cgroups of its own, which limit its memory and
// processes as a started one's do, and takes its processes with it.
func TestForkedInstanceLimits(t *testing.T) {
	e := newForkingExecutor(t, local.Config{Spares: 1, Pids: 64})
	deployIn(t, e, "default", "warmup", forkedProbe)
	invokeIn(t, e, "default", "warmup", "{}")
	zygoteOf(t, e, "default")
	deployIn(t, e, "default", "hungry", `import os, subprocess
def handle(event, context):
    if event.get("cgroup"):
        return open("/proc/self/cgroup").read()
    if event.get("sleep"):
        subprocess.Popen(["/bin/sleep", event["sleep"]], start_new_session=True)
        return "started"
    if event.get("fork"):
        pids = []
        try:
            for _ in range(200):
                pid = os.fork()
                if pid == 0:
                    import time
                    time.sleep(30)
                    os._exit(0)
                pids.append(pid)
            return "forked 200"
        except OSError as e:
            return "stopped after %d" % len(pids)
        finally:
            for pid in pids:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
    return len(bytearray(event["mb"] << 20))
`, func(tg *runtime.Target) { tg.MemoryMB = 64 })
	r := invokeIn(t, e, "default", "hungry", `{"cgroup": true}`)
	pids := local.InstancePids(e, "default", "hungry")
	if len(pids) != 1 || parentOf(t, pids[0]) != local.ZygotePid(e, "python3.11", "default") {
		t.Fatalf("instances %v: want one, forked", pids)
	}
	var cgroups string
	json.Unmarshal([]byte(r.body), &cgroups)
	// "4:memory:/.../sless-PID-sless-run-X/i7" (v1), "0::/.../i7" (v2).
	parent, _ := local.CgroupParentOf(e)
	own := false
	for line := range strings.Lines(cgroups) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) == 3 && (parts[1] == "memory" || parts[1] == "") && strings.Contains(parts[2], "/"+filepath.Base(parent)+"/i") {
			own = true
		}
	}
	if !own {
		t.Errorf("the forked instance's cgroups:\n%s\nwant a memory cgroup of its own below %s", cgroups, parent)
	}
	if r := invokeIn(t, e, "default", "hungry", `{"fork": true}`); r.err != nil || !strings.HasPrefix(r.body, `"stopped after`) {
		t.Errorf("forking 200 processes with a limit of 64: %+v", r)
	}
	if r := invokeIn(t, e, "default", "hungry", `{"mb": 8}`); r.err != nil || r.body != "8388608" {
		t.Errorf("8 MiB: %+v", r)
	}
	r = invokeIn(t, e, "default", "hungry", `{"mb": 200}`)
	if !errors.Is(r.err, runtime.ErrCrashed) || !strings.Contains(r.err.Error(), "more memory than memory_mb allows") {
		t.Errorf("200 MiB in a 64 MiB function: %+v (%v); want an out-of-memory kill", r, r.err)
	}
	marker := fmt.Sprintf("8%d.%d", os.Getpid()%1000, time.Now().UnixNano()%1000000)
	if r := invokeIn(t, e, "default", "hungry", fmt.Sprintf(`{"sleep": %q}`, marker)); r.err != nil {
		t.Fatalf("sleep: %+v", r)
	}
	testenv.Eventually(t, 30*time.Second, "the handler's process running", func() bool { return len(pidsWith(marker)) > 0 })
	if err := e.Undeploy(context.Background(), meta.Key{Namespace: "default", Name: "hungry"}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the handler's process gone with the instance", func() bool { return len(pidsWith(marker)) == 0 })
}

// Instances outlive their zygote: when it dies they keep serving, and the
// next cold start gets a new zygote; an idle zygote is retired, and its
// instances keep serving too.
func TestForkedInstancesOutliveTheirZygote(t *testing.T) {
	e := newForkingExecutor(t, local.Config{Spares: 1, IdleTimeout: time.Hour})
	deployIn(t, e, "default", "kept", forkedProbe, func(tg *runtime.Target) { tg.MinInstances = 1 })
	invokeIn(t, e, "default", "kept", "{}")
	first := zygoteOf(t, e, "default")
	deployIn(t, e, "default", "forked", forkedProbe, func(tg *runtime.Target) { tg.MinInstances = 1 })
	if r := invokeIn(t, e, "default", "forked", "{}"); r.err != nil {
		t.Fatal(r.err)
	}
	// The spare that replaces the one the cold start took is forked after
	// it: once it is there, the zygote's children are all known.
	testenv.Eventually(t, 30*time.Second, "the spare replaced", func() bool {
		ready, forking := local.ForkedSpares(e, "python3.11", "default")
		return ready == 1 && forking == 0
	})
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", first, first))
	if err != nil {
		t.Fatal(err)
	}
	instance := local.InstancePids(e, "default", "forked")[0]
	for f := range strings.FieldsSeq(string(children)) {
		// The zygote is the init's child that no pool knows, and the
		// spares; killing them all leaves the instance alone.
		if pid, _ := strconv.Atoi(f); pid != instance {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	testenv.Eventually(t, 30*time.Second, "the dead zygote noticed", func() bool { return local.ZygotePid(e, "python3.11", "default") != first })
	if r := invokeIn(t, e, "default", "forked", "{}"); r.err != nil || r.result.StatusCode != 200 {
		t.Errorf("the instance after its zygote died: %+v %v", r, r.err)
	}
	deployIn(t, e, "default", "later", forkedProbe)
	if r := invokeIn(t, e, "default", "later", "{}"); r.err != nil || r.result.StatusCode != 200 {
		t.Errorf("a cold start after the zygote died: %+v %v", r, r.err)
	}
	second := zygoteOf(t, e, "default")
	if second == first {
		t.Fatalf("the zygote %d is the dead one", second)
	}

	local.ReapAt(e, time.Now().Add(2*time.Hour))
	testenv.Eventually(t, 30*time.Second, "the idle zygote retired", func() bool { return local.ZygotePid(e, "python3.11", "default") == 0 })
	for _, name := range []string{"kept", "forked"} {
		if r := invokeIn(t, e, "default", name, "{}"); r.err != nil || r.result.StatusCode != 200 {
			t.Errorf("%s after the zygote retired: %+v %v", name, r, r.err)
		}
	}
}

// The spare a cold start takes is replaced once the invocation the cold
// start was for has ended: a fork beside it would take its CPU.
func TestSpareReplacedAfterTheColdStartsInvocation(t *testing.T) {
	e := newForkingExecutor(t, local.Config{Spares: 1, IdleTimeout: time.Hour})
	spareReady := func() bool {
		ready, forking := local.ForkedSpares(e, "python3.11", "default")
		return ready == 1 && forking == 0
	}
	deployIn(t, e, "default", "first", forkedProbe)
	invokeIn(t, e, "default", "first", "{}") // starts the zygote
	testenv.Eventually(t, 30*time.Second, "a forked spare ready", spareReady)

	deployIn(t, e, "default", "second", forkedProbe)
	lease, err := e.Acquire(context.Background(), meta.Key{Namespace: "default", Name: "second"})
	if err != nil {
		t.Fatal(err)
	}
	if lease.ColdStart() == 0 {
		t.Fatal("the first invocation of a function was not a cold start")
	}
	if ready, forking := local.ForkedSpares(e, "python3.11", "default"); ready+forking != 0 {
		t.Errorf("before the cold start's invocation: %d spares ready and %d forking, want none", ready, forking)
	}
	if r := send(lease, "{}"); r.err != nil || r.result.StatusCode != 200 {
		t.Fatalf("the cold start's invocation: %+v", r)
	}
	if ready, forking := local.ForkedSpares(e, "python3.11", "default"); ready+forking != 0 {
		t.Errorf("before the cold start's lease was released: %d spares ready and %d forking, want none", ready, forking)
	}
	lease.Release()
	testenv.Eventually(t, 30*time.Second, "the spare replaced", spareReady)
}

// A zygote that cannot fork is retired, and cold starts start their
// processes instead until a retry.
func TestFailedForkStartsProcesses(t *testing.T) {
	e := newForkingExecutor(t, local.Config{Spares: 1})
	deployIn(t, e, "default", "first", forkedProbe)
	invokeIn(t, e, "default", "first", "{}")
	zygoteOf(t, e, "default")
	local.ForkFailed(e, "python3.11", "default")
	if pid := local.ZygotePid(e, "python3.11", "default"); pid != 0 {
		t.Fatalf("the zygote %d still forks after a failed fork", pid)
	}
	for _, name := range []string{"second", "third"} {
		deployIn(t, e, "default", name, forkedProbe)
		if r := invokeIn(t, e, "default", name, "{}"); r.err != nil || r.result.StatusCode != 200 {
			t.Fatalf("%s: %+v", name, r)
		}
		pids := local.InstancePids(e, "default", name)
		if len(pids) != 1 || parentOf(t, pids[0]) != os.Getpid() {
			t.Errorf("%s: instances %v; want one started by the executor (parent %d)", name, pids, os.Getpid())
		}
	}
	if pid := local.ZygotePid(e, "python3.11", "default"); pid != 0 {
		t.Errorf("a zygote %d started again before the retry", pid)
	}
}
