package local_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/meta"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/local"
	"sless.kube5s.ru/sless/modules/runtime/nodejs"
	"sless.kube5s.ru/sless/modules/runtime/python"
)

func newExecutor(t *testing.T, cfg local.Config) *local.Executor {
	t.Helper()
	reg, err := runtime.NewRegistry([]runtime.Provider{python.New(), nodejs.New()})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range reg.Names() {
		p, _ := reg.Get(name)
		if _, _, err := p.Interpreter(context.Background()); err != nil {
			t.Skipf("needs python3.11 and node 20: %v", err)
		}
	}
	e := local.New(cfg, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return e
}

// code writes a function's files and returns the directory.
func code(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func target(name, rt, artifact string) runtime.Target {
	return runtime.Target{Namespace: "default", Name: name, Version: "v1", Runtime: rt, Artifact: artifact,
		Handler: "handler.handle", Timeout: 5 * time.Second, MemoryMB: 256, MaxInstances: 2, Concurrency: 1}
}

type response struct {
	lease  runtime.Lease
	result runtime.Result
	body   string
	err    error
}

// invoke acquires, sends body and releases.
func invoke(t *testing.T, e *local.Executor, name, body string) response {
	t.Helper()
	return invokeIn(t, e, "default", name, body)
}

func TestColdThenWarm(t *testing.T) {
	e := newExecutor(t, local.Config{})
	for _, rt := range []struct{ runtime, file, src string }{
		{"python3.11", "handler.py", "import os\ndef handle(event, context):\n    return {'got': event, 'env': os.environ.get('GREETING')}\n"},
		{"nodejs20", "handler.js", "exports.handle = async (event) => ({got: event, env: process.env.GREETING});\n"},
	} {
		t.Run(rt.runtime, func(t *testing.T) {
			name := "hello-" + strings.ReplaceAll(rt.runtime, ".", "")
			tg := target(name, rt.runtime, code(t, map[string]string{rt.file: rt.src}))
			tg.Env = map[string]string{"GREETING": "hi"}
			if ro, err := e.Deploy(context.Background(), tg); err != nil || !ro.Ready {
				t.Fatalf("Deploy: %+v, %v; want ready", ro, err)
			}
			first := invoke(t, e, name, `{"n": 1}`)
			if first.err != nil || first.result.StatusCode != 200 || first.body != `{"got":{"n":1},"env":"hi"}` {
				t.Fatalf("first: %+v", first)
			}
			if first.lease.ColdStart() <= 0 {
				t.Error("the first invocation was not a cold start")
			}
			second := invoke(t, e, name, `2`)
			if second.err != nil || second.body != `{"got":2,"env":"hi"}` || second.lease.ColdStart() != 0 {
				t.Errorf("second: %+v, cold %v; want a warm answer", second, second.lease.ColdStart())
			}
		})
	}
}

// Invocations that arrive together at a function with no instance wait
// for the one instance their cold start makes, which then serves them all
// at once: only the first goes behind the instance's specialize request,
// and the others' capacity is counted as coming.
func TestColdBurstSharesOneInstance(t *testing.T) {
	e := newExecutor(t, local.Config{})
	// Each call returns once four have arrived.
	dir := code(t, map[string]string{"handler.py": "import os, time\ndef handle(event, context):\n" +
		"    open(os.path.join(event, str(time.monotonic_ns())), 'w').close()\n" +
		"    deadline = time.monotonic() + 10\n" +
		"    while len(os.listdir(event)) < 4 and time.monotonic() < deadline:\n        time.sleep(0.01)\n" +
		"    return len(os.listdir(event))\n"})
	tg := target("burst", "python3.11", dir)
	tg.Concurrency, tg.MaxInstances = 4, 4
	e.Deploy(context.Background(), tg)
	arrivals := t.TempDir()
	results := make(chan response, 4)
	for range 4 {
		go func() { results <- invoke(t, e, "burst", strconv.Quote(arrivals)) }()
	}
	cold := 0
	for range 4 {
		r := <-results
		if r.err != nil || r.body != "4" {
			t.Errorf("%+v; want all four in flight at once", r)
		}
		if r.lease != nil && r.lease.ColdStart() > 0 {
			cold++
		}
	}
	for _, st := range e.InstanceStats() {
		if st.Key.Name == "burst" && (st.Starting+st.Idle+st.Busy != 1 || cold != 1) {
			t.Errorf("instances %+v, %d cold starts reported; want one of each", st, cold)
		}
	}
}

func TestEnvIsExactlyTheFunctions(t *testing.T) {
	t.Setenv("SLESS_SERVER_SECRET", "must-not-leak")
	e := newExecutor(t, local.Config{})
	dir := code(t, map[string]string{"handler.py": "import os\ndef handle(event, context):\n    return sorted(os.environ)\n"})
	tg := target("env", "python3.11", dir)
	tg.Env = map[string]string{"ONLY_MINE": "1"}
	e.Deploy(context.Background(), tg)
	r := invoke(t, e, "env", "")
	if r.err != nil || strings.Contains(r.body, "SLESS_SERVER_SECRET") || !strings.Contains(r.body, "ONLY_MINE") || !strings.Contains(r.body, "SLESS_FUNCTION") {
		t.Errorf("env: %s %v; want ONLY_MINE and SLESS_FUNCTION, not the server's variables", r.body, r.err)
	}
	// A variable the interpreter reads at start is honoured (no spare).
	dir2 := code(t, map[string]string{"handler.py": "import sys\ndef handle(event, context):\n    return '/extra' in sys.path\n", "extra": ""})
	tg2 := target("startup-env", "python3.11", dir2)
	tg2.Env = map[string]string{"PYTHONPATH": "/extra"}
	e.Deploy(context.Background(), tg2)
	if r := invoke(t, e, "startup-env", ""); r.err != nil || r.body != "true" {
		t.Errorf("PYTHONPATH: %s %v; want true", r.body, r.err)
	}
}

func TestConcurrencyLimitsAndQueue(t *testing.T) {
	e := newExecutor(t, local.Config{QueueDepth: 2})
	// An invocation whose event names a file returns once the file exists.
	dir := code(t, map[string]string{"handler.py": "import os, time\ndef handle(event, context):\n" +
		"    while event and not os.path.exists(event):\n        time.sleep(0.01)\n    return 'ok'\n"})
	tg := target("slow", "python3.11", dir)
	tg.MaxInstances = 1
	e.Deploy(context.Background(), tg)
	invoke(t, e, "slow", "") // start the instance

	release := filepath.Join(t.TempDir(), "release")
	var wg sync.WaitGroup
	results := make(chan response, 5)
	// The first runs until released, the next two wait in the queue, and
	// the last two find it full; each is sent once the one before arrived.
	for i := range 5 {
		wg.Go(func() { results <- invoke(t, e, "slow", strconv.Quote(release)) })
		if i < 3 {
			testenv.Eventually(t, 10*time.Second, fmt.Sprintf("invocation %d to arrive", i+1), func() bool {
				p := local.PoolOf(e, "default", "slow")
				return p.InFlight == 1 && p.Waiting == i
			})
		}
	}
	// The refused ones answer without waiting.
	for range 2 {
		if r := <-results; !errors.Is(r.err, runtime.ErrOverloaded) {
			t.Errorf("with the queue full: %+v; want overloaded", r)
		}
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r.err != nil || r.body != `"ok"` {
			t.Errorf("once released: %+v; want answered", r)
		}
	}
}

func TestTimeoutAndCrashRecycle(t *testing.T) {
	e := newExecutor(t, local.Config{})
	dir := code(t, map[string]string{"handler.py": `import os, time
def handle(event, context):
    if event == "hang":
        time.sleep(60)
    if event == "exit":
        os._exit(3)
    return os.getpid()
`})
	tg := target("flaky", "python3.11", dir)
	tg.Timeout = 500 * time.Millisecond
	e.Deploy(context.Background(), tg)
	pid := invoke(t, e, "flaky", `"pid"`).body

	if r := invoke(t, e, "flaky", `"hang"`); !errors.Is(r.err, runtime.ErrTimeout) {
		t.Errorf("hang: %+v; want ErrTimeout", r)
	}
	after := invoke(t, e, "flaky", `"pid"`)
	if after.err != nil || after.body == pid {
		t.Errorf("after a timeout: %+v; want a new instance (old pid %s)", after, pid)
	}
	r := invoke(t, e, "flaky", `"exit"`)
	if !errors.Is(r.err, runtime.ErrCrashed) || !strings.Contains(r.err.Error(), "exit status 3") {
		t.Errorf("exit: %v; want ErrCrashed naming exit status 3", r.err)
	}
	if again := invoke(t, e, "flaky", `"pid"`); again.err != nil || again.result.StatusCode != 200 {
		t.Errorf("after a crash: %+v (%v)", again, again.err)
	}
}

// An instance's socket, and the rehearsal's directory that a wrapper killed
// while it rehearsed leaves beside it, go when the instance dies.
func TestDeadInstancesFilesAreRemoved(t *testing.T) {
	e := newExecutor(t, local.Config{})
	dir := code(t, map[string]string{"handler.py": `import os
def handle(event, context):
    if event == "exit":
        os._exit(3)
`})
	e.Deploy(context.Background(), target("dying", "python3.11", dir))
	if r := invoke(t, e, "dying", "{}"); r.err != nil {
		t.Fatal(r.err)
	}
	socks, err := filepath.Glob(filepath.Join(local.RunDirOf(e), "*.sock"))
	if err != nil || len(socks) != 1 {
		t.Fatalf("sockets of the one instance: %v %v", socks, err)
	}
	// What the wrapper writes while it rehearses (see PROTOCOL.md).
	left := filepath.Join(socks[0]+".rehearsal", "_sless_rehearsal.py")
	if err := os.MkdirAll(filepath.Dir(left), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(left, []byte("def handle(event, context): pass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := invoke(t, e, "dying", `"exit"`); !errors.Is(r.err, runtime.ErrCrashed) {
		t.Fatalf("the invocation that exits: %+v; want ErrCrashed", r)
	}
	testenv.Eventually(t, 10*time.Second, "the dead instance's socket and rehearsal removed", func() bool {
		rest, _ := filepath.Glob(socks[0] + "*")
		return len(rest) == 0
	})
}

func TestColdStartLongerThanTheTimeoutIsWaitedFor(t *testing.T) {
	e := newExecutor(t, local.Config{})
	// Loading the handler takes longer than the function's timeout, which
	// bounds the handler, not the instance's start.
	dir := code(t, map[string]string{"handler.py": `import time
time.sleep(1.5)
def handle(event, context):
    return "ok"
`})
	tg := target("slowload", "python3.11", dir)
	tg.Timeout = 500 * time.Millisecond
	e.Deploy(context.Background(), tg)
	if r := invoke(t, e, "slowload", ""); r.err != nil || r.result.StatusCode != 200 {
		t.Errorf("got %+v (%v); want 200 once the instance started", r, r.err)
	}
}

func TestBadHandlerFailsToStart(t *testing.T) {
	e := newExecutor(t, local.Config{})
	dir := code(t, map[string]string{"handler.py": "import no_such_module\n"})
	e.Deploy(context.Background(), target("broken", "python3.11", dir))
	r := invoke(t, e, "broken", "")
	if !errors.Is(r.err, runtime.ErrStart) || !strings.Contains(r.err.Error(), "no_such_module") {
		t.Errorf("got %v; want ErrStart naming the missing module", r.err)
	}
}

func TestMemoryLimit(t *testing.T) {
	e := newExecutor(t, local.Config{})
	dir := code(t, map[string]string{"handler.py": "def handle(event, context):\n    return len(bytearray(event << 20))\n"})
	tg := target("hungry", "python3.11", dir)
	tg.MemoryMB = 64
	e.Deploy(context.Background(), tg)
	if r := invoke(t, e, "hungry", "8"); r.err != nil || r.body != "8388608" {
		t.Errorf("8 MiB: %+v", r)
	}
	// A memory cgroup kills the process; RLIMIT_DATA fails the allocation.
	r := invoke(t, e, "hungry", "200")
	killed := errors.Is(r.err, runtime.ErrCrashed) && strings.Contains(r.err.Error(), "more memory than memory_mb allows")
	refused := r.err == nil && r.result.StatusCode == 500 && strings.Contains(r.result.Error, "MemoryError")
	if !killed && !refused {
		t.Errorf("200 MiB in a 64 MiB function: %+v (%v); want an out-of-memory kill or a MemoryError", r, r.err)
	}
	if r := invoke(t, e, "hungry", "1"); r.err != nil || r.body != "1048576" {
		t.Errorf("after running out of memory: %+v", r)
	}
}

func TestScaleToZeroAndMinInstances(t *testing.T) {
	// The reaper runs at a time of the test's own: the real one, every
	// second, finds nothing idle for an hour.
	e := newExecutor(t, local.Config{IdleTimeout: time.Hour})
	dir := code(t, map[string]string{"handler.py": "import os\ndef handle(event, context):\n    return os.getpid()\n"})
	e.Deploy(context.Background(), target("idle", "python3.11", dir))
	warm := target("warm", "python3.11", dir)
	warm.MinInstances = 1
	e.Deploy(context.Background(), warm)
	// The reaper visits only the pools with instances or a minimum to keep.
	reapable := func(when string, want map[string]bool) {
		t.Helper()
		for name, want := range want {
			if got := local.Reapable(e, "default", name); got != want {
				t.Errorf("%s: the reaper visits %q: %v, want %v", when, name, got, want)
			}
		}
	}
	reapable("deployed", map[string]bool{"idle": false, "warm": true})
	first := invoke(t, e, "idle", "")
	reapable("after a call", map[string]bool{"idle": true, "warm": true})
	// The min instance starts in the background.
	testenv.Eventually(t, 30*time.Second, "the min instance to start", func() bool {
		return local.PoolOf(e, "default", "warm").Up == 1
	})
	local.ReapAt(e, time.Now().Add(2*time.Hour))
	reapable("scaled to zero", map[string]bool{"idle": false, "warm": true})
	if r := invoke(t, e, "idle", ""); r.err != nil || r.lease.ColdStart() == 0 || r.body == first.body {
		if r.err != nil {
			t.Fatalf("after idling: %v", r.err)
		}
		t.Errorf("after idling: %+v, cold %v; want a new instance (old pid %s)", r, r.lease.ColdStart(), first.body)
	}
	if r := invoke(t, e, "warm", ""); r.err != nil || r.lease.ColdStart() != 0 {
		if r.err != nil {
			t.Fatalf("warm: %v", r.err)
		}
		t.Errorf("min_instances=1: %+v, cold %v; want a warm instance", r, r.lease.ColdStart())
	}
}

// TestWarmKeepsAnInstanceUntilItsInvocation warms a function for an
// invocation expected after the idle timeout: the instance must still be
// there then, and go once it idles after that.
func TestWarmKeepsAnInstanceUntilItsInvocation(t *testing.T) {
	e := newExecutor(t, local.Config{IdleTimeout: time.Hour})
	dir := code(t, map[string]string{"handler.py": "import os\ndef handle(event, context):\n    return os.getpid()\n"})
	e.Deploy(context.Background(), target("prewarmed", "python3.11", dir))
	expected := time.Now().Add(10 * time.Hour)
	if err := e.Warm(context.Background(), meta.Key{Namespace: "default", Name: "prewarmed"}, expected); err != nil {
		t.Fatal(err)
	}
	// Past the idle timeout, well before the invocation is expected. The
	// warm's start runs in the background: the instance is there once an
	// invocation finds it warm.
	testenv.Eventually(t, 30*time.Second, "the warm to start an instance", func() bool {
		return local.PoolOf(e, "default", "prewarmed").Up == 1
	})
	local.ReapAt(e, time.Now().Add(2*time.Hour))
	r := invoke(t, e, "prewarmed", "")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.lease.ColdStart() != 0 {
		t.Errorf("the invocation a warm was for had a cold start of %v; want the warmed instance", r.lease.ColdStart())
	}
	// Past the expected time, idling stops it as usual.
	local.ReapAt(e, expected.Add(2*time.Hour))
	if again := invoke(t, e, "prewarmed", ""); again.err != nil || again.lease.ColdStart() == 0 || again.body == r.body {
		t.Errorf("after idling past the expected invocation: %+v; want a new instance (old pid %s)", again, r.body)
	}
}

func TestNewVersionDrainsOld(t *testing.T) {
	e := newExecutor(t, local.Config{})
	v1 := code(t, map[string]string{"handler.py": "def handle(e, c):\n    return 'v1'\n"})
	v2 := code(t, map[string]string{"handler.py": "def handle(e, c):\n    return 'v2'\n"})
	tg := target("versioned", "python3.11", v1)
	e.Deploy(context.Background(), tg)
	if r := invoke(t, e, "versioned", ""); r.body != `"v1"` {
		t.Fatalf("v1: %+v", r)
	}
	tg.Version, tg.Artifact = "v2", v2
	e.Deploy(context.Background(), tg)
	if r := invoke(t, e, "versioned", ""); r.body != `"v2"` {
		t.Errorf("after deploying v2: %+v", r)
	}
	e.Undeploy(context.Background(), meta.Key{Namespace: "default", Name: "versioned"})
	if _, err := e.Acquire(context.Background(), meta.Key{Namespace: "default", Name: "versioned"}); !errors.Is(err, runtime.ErrNotDeployed) {
		t.Errorf("after Undeploy: %v; want ErrNotDeployed", err)
	}
}

func TestWarmAndSuspend(t *testing.T) {
	e := newExecutor(t, local.Config{})
	dir := code(t, map[string]string{"handler.py": "import os\ndef handle(event, context):\n    return os.getpid()\n"})
	tg := target("warmed", "python3.11", dir)
	if err := e.Warm(context.Background(), meta.Key{Namespace: "default", Name: "nope"}, time.Now()); !errors.Is(err, runtime.ErrNotDeployed) {
		t.Errorf("Warm of an unknown function: %v", err)
	}
	e.Deploy(context.Background(), tg)
	if err := e.Warm(context.Background(), meta.Key{Namespace: "default", Name: "warmed"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	// The warmed instance is found without a cold start once it is up.
	testenv.Eventually(t, 10*time.Second, "the warm to start an instance", func() bool {
		return local.PoolOf(e, "default", "warmed").Up == 1
	})
	first := invoke(t, e, "warmed", "")
	if first.err != nil || first.lease.ColdStart() != 0 {
		t.Fatalf("the warmed instance: %+v, cold start %v; want it to serve warm", first, first.lease.ColdStart())
	}
	// Suspending stops the idle instance now, even with min_instances.
	tg.MinInstances = 1
	tg.Suspended = true
	e.Deploy(context.Background(), tg)
	r := invoke(t, e, "warmed", "")
	if r.err != nil || r.body == first.body || r.lease.ColdStart() == 0 {
		t.Errorf("after suspending: %+v; want a cold start in a new process (old pid %s)", r, first.body)
	}
}

func TestStaleCgroupsAreRemoved(t *testing.T) {
	e := newExecutor(t, local.Config{})
	dir, ok := local.CgroupParentOf(e)
	if !ok {
		t.Skip("no writable memory cgroup on this machine: memory is limited with RLIMIT_DATA")
	}
	// What a server with pid 2^22+1 (above pid_max's usual maximum) killed
	// before its stop leaves behind.
	stale := filepath.Join(filepath.Dir(dir), "sless-4194305-sless-run-1")
	if err := os.MkdirAll(filepath.Join(stale, "i1"), 0o755); err != nil {
		t.Fatal(err)
	}
	newExecutor(t, local.Config{})
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale cgroup %s is still there: %v", stale, err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the running executor's cgroup %s was removed: %v", dir, err)
	}
}

func TestDeadServersRunDirsAreRemoved(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	// What a server with pid 2^22+1 (above pid_max's usual maximum) killed
	// before its stop leaves behind, next to what this test's running
	// executor and other programs own.
	stale := filepath.Join(tmp, "sless-run-4194305-123")
	if err := os.MkdirAll(filepath.Join(stale, "s1"), 0o755); err != nil {
		t.Fatal(err)
	}
	running := newExecutor(t, local.Config{})
	other := filepath.Join(tmp, "sless-run-other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead server's %s is still there: %v", stale, err)
	}
	newExecutor(t, local.Config{})
	for _, dir := range []string{local.RunDirOf(running), other} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s was removed: %v", dir, err)
		}
	}
}
