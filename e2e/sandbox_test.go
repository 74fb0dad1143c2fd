package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"sless.kube5s.ru/sless/internal/testenv"
)

// attackerPy runs every probe of the escape suite from inside a Python
// handler and reports, per probe, "blocked: <why>" or "ESCAPED: <what>".
// The test tells it where everything is, as an attacker who read the source
// would know.
const attackerPy = `import ctypes, errno, glob, json, os, signal, socket, subprocess, time

def handle(event, context):
    mode = event.get("mode")
    if mode == "hello":
        return "hello"
    if mode == "env":
        return dict(os.environ)
    if mode == "forkbomb":
        return forkbomb()
    if mode == "killall":
        # Every process this one may signal: its own pid namespace's only.
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return "killed what it could"
    if mode == "leave":
        # A child in a new session and a daemonized grandchild.
        subprocess.Popen(["/bin/sleep", event["marker"]], start_new_session=True)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv("/bin/sleep", ["/bin/sleep", event["marker"]])
            os._exit(0)
        return "left"
    return {name: run(fn, event) for name, fn in PROBES.items()}

def run(fn, event):
    try:
        what = fn(event)
    except Exception as e:
        return "blocked: %s: %s" % (type(e).__name__, e)
    if what is None:
        return "blocked"
    return "ESCAPED: " + str(what)[:300]

def read(path):
    with open(path, "rb") as f:
        return f.read(200)

def write(path):
    with open(path, "w") as f:
        f.write("pwned")
    return "wrote " + path

def read_data_dir(e):
    return os.listdir(e["data_dir"])

def read_token(e):
    return read(os.path.join(e["data_dir"], "api-token"))

def read_db(e):
    return read(os.path.join(e["data_dir"], "sless.db"))

def read_blobs(e):
    return os.listdir(os.path.join(e["data_dir"], "blobs"))

def read_other_code(e):
    return read(os.path.join(e["victim_artifact"], "handler.py"))

def write_other_code(e):
    return write(os.path.join(e["victim_artifact"], "handler.py"))

def write_own_code(e):
    return write("/code/handler.py")

def fill_code_dir(e):
    return write("/code/big")

def server_environ(e):
    return read("/proc/%d/environ" % e["server_pid"])

def server_cmdline(e):
    return read("/proc/%d/cmdline" % e["server_pid"])

def any_foreign_process(e):
    # Every process this instance sees must be its own.
    found = []
    for p in glob.glob("/proc/[0-9]*"):
        try:
            cmd = read(p + "/cmdline")
        except OSError:
            continue
        if b"sless" in cmd.split(b"\0")[0] or b"victim-secret" in cmd:
            found.append(cmd)
    return found or None

def other_memory(e):
    for pid in e["instance_pids"]:
        try:
            with open("/proc/%d/mem" % pid, "rb") as f:
                return "opened the memory of %d" % pid
        except FileNotFoundError:
            pass
    for p in glob.glob("/proc/[0-9]*"):
        try:
            if b"victim-secret" in read(p + "/environ"):
                return "found the victim's secret in " + p
        except OSError:
            pass
    return None

def signal_server(e):
    os.kill(e["server_pid"], 0)
    return "could signal the server"

def signal_instances(e):
    # Only the pids the test names: should the sandbox ever regress, a probe
    # must not be able to take down the machine the tests run on.
    hit = []
    for pid in e["instance_pids"]:
        try:
            os.kill(pid, signal.SIGKILL)
            hit.append(pid)
        except ProcessLookupError:
            pass
    return hit or None

def write_cgroup(e):
    return write(e["cgroup_file"])

def connect_sockets(e):
    reached = []
    for path in e["sockets"]:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            reached.append(path)
        except OSError:
            pass
        finally:
            s.close()
    return reached or None

def write_outside_tmp(e):
    wrote = []
    for path in ["/x", "/etc/x", "/usr/x", "/root/x", "/proc/x", "/dev/x"]:
        try:
            write(path)
            wrote.append(path)
        except OSError:
            pass
    return wrote or None

def fill_socket_dir(e):
    # Its socket's directory is its own but holds little.
    try:
        with open("/run/sless/fill", "wb") as f:
            f.write(b"x" * (1 << 20))
            f.flush()
        return "wrote 1 MiB into /run/sless"
    finally:
        try:
            os.remove("/run/sless/fill")
        except OSError:
            pass

def inherited_descriptors(e):
    # Nothing of a zygote's or the server's: no packet socket (a zygote's
    # control socket), no pidfd.
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if "pidfd" in target:
            found.append(target)
            continue
        try:
            s = socket.socket(fileno=os.dup(int(fd)))
        except OSError:
            continue
        if s.type == socket.SOCK_SEQPACKET:
            found.append("packet socket " + fd)
        s.close()
    return found or None

def zygote_mounts(e):
    # One /proc (its own), and no other instance's code mount point.
    with open("/proc/self/mountinfo") as f:
        mounts = f.read()
    procs = mounts.count(" - proc ")
    codes = os.listdir("/.sless-codes") if os.path.isdir("/.sless-codes") else []
    if procs == 1 and not codes and "sless-codes" not in mounts:
        return None
    return "%d proc mounts, code mount points %s" % (procs, codes)

libc = ctypes.CDLL(None, use_errno=True)

def syscall_refused(call):
    if call() == 0:
        return "succeeded"
    err = ctypes.get_errno()
    if err != errno.EPERM:
        return "failed with errno %d, not EPERM" % err
    return None

def mount(e):
    return syscall_refused(lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))

def unshare_userns(e):
    return syscall_refused(lambda: libc.unshare(0x10000000))

def ptrace_init(e):
    return syscall_refused(lambda: libc.ptrace(16, 1, None, None))  # PTRACE_ATTACH

def keyctl(e):
    return syscall_refused(lambda: libc.syscall(250, 0, 0, 0, 0, 0))  # keyctl(2)

def bpf(e):
    return syscall_refused(lambda: libc.syscall(321, 0, None, 0))  # bpf(2)

def is_root(e):
    return "uid 0" if os.getuid() == 0 or os.geteuid() == 0 else None

def no_new_privs(e):
    with open("/proc/self/status") as f:
        status = f.read()
    return None if "NoNewPrivs:\t1" in status and "Seccomp:\t2" in status else status

PROBES = {n: f for n, f in globals().items() if callable(f) and f.__module__ == __name__ and n not in
          ("handle", "run", "read", "write", "forkbomb", "syscall_refused")}

def forkbomb():
    pids = []
    try:
        for _ in range(2000):
            pid = os.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            pids.append(pid)
        result = "forked 2000 processes"
    except OSError as e:
        result = "stopped after %d: %s" % (len(pids), e)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return result
`

// attackerJS is a Node.js subset of the probes.
const attackerJS = `const fs = require("fs"), path = require("path"), cp = require("child_process");
function run(fn) {
  try { const what = fn(); return what == null ? "blocked" : "ESCAPED: " + String(what).slice(0, 300); }
  catch (e) { return "blocked: " + (e.code || e.name) + ": " + e.message; }
}
exports.handle = async (event) => {
  if (event.mode === "hello") return "hello";
  if (event.mode === "env") return process.env;
  if (event.mode === "leave") {
    cp.spawn("/bin/sleep", [event.marker], { detached: true, stdio: "ignore" }).unref();
    return "left";
  }
  return {
    read_token: run(() => fs.readFileSync(path.join(event.data_dir, "api-token"), "utf8")),
    read_db: run(() => fs.readFileSync(path.join(event.data_dir, "sless.db")).length),
    read_other_code: run(() => fs.readFileSync(path.join(event.victim_artifact, "handler.py"), "utf8")),
    write_own_code: run(() => { fs.writeFileSync("/code/handler.js", "pwned"); return "wrote"; }),
    server_environ: run(() => fs.readFileSync("/proc/" + event.server_pid + "/environ", "utf8")),
    signal_server: run(() => { process.kill(event.server_pid, 0); return "could signal"; }),
    signal_instances: run(() => { const hit = []; for (const p of event.instance_pids) { try { process.kill(p, "SIGKILL"); hit.push(p); } catch (e) {} } return hit.length ? hit : null; }),
    write_cgroup: run(() => { fs.writeFileSync(event.cgroup_file, "1000000000"); return "wrote"; }),
    write_outside_tmp: run(() => { fs.writeFileSync("/etc/x", "pwned"); return "wrote /etc/x"; }),
    is_root: run(() => process.getuid() === 0 ? "uid 0" : null),
  };
};
`

const victimPy = `def handle(event, context):
    return "victim ok"
`

// sandboxInfo is what the probes are told about the server.
type sandboxInfo struct {
	DataDir        string   `json:"data_dir"`
	VictimArtifact string   `json:"victim_artifact"`
	ServerPid      int      `json:"server_pid"`
	InstancePids   []int    `json:"instance_pids"`
	CgroupFile     string   `json:"cgroup_file"`
	Sockets        []string `json:"sockets"`
}

// limitsLine finds the parent of the instances' memory cgroups in the
// server's start-up log.
var limitsLine = regexp.MustCompile(`mechanism="cgroup v[12] (\S+/sless-\d+-sless-run-[0-9-]+)`)

// serverCanary is a credential in the server's environment that no instance
// may see.
const serverCanary = "AWS_SECRET_ACCESS_KEY=server-canary-credential"

// The escape suite against a server of the sandbox's root mode (rootless when
// the test does not run as root).
func TestSandboxEscapes(t *testing.T) {
	s := startServer(t, serverOptions{env: []string{serverCanary}})
	requireSandbox(t, s)
	escapeSuite(t, s, false)
}

// The escape suite against a server started as an ordinary user: the
// rootless mode, in user namespaces, must stop every probe too.
func TestRootlessSandboxEscapes(t *testing.T) {
	s := startServer(t, serverOptions{env: []string{serverCanary}, unprivileged: true})
	requireSandbox(t, s, "rootless mode")
	escapeSuite(t, s, false)
}

// The escape suite against python instances forked from a zygote, and the
// attacks a zygote adds: on the zygote and its init, and through what an
// instance could inherit from them.
func TestForkedSandboxEscapes(t *testing.T) {
	s := startServer(t, serverOptions{env: []string{serverCanary}})
	requireSandbox(t, s, "root mode")
	s.waitFor("the start-up log saying whether instances are forked", func() bool {
		return strings.Contains(s.logs.String(), "forked from a zygote per runtime and namespace") ||
			strings.Contains(s.logs.String(), "instances are not forked")
	})
	if !strings.Contains(s.logs.String(), "forked from a zygote per runtime and namespace") {
		t.Skipf("the server forks no instances here: %s", firstLine(s.logs.String(), "instances are not forked"))
	}
	s.mustCLI("deploy", writeTree(t, map[string]string{"handler.py": victimPy}), "--name", "warmup", "--runtime", "python3.11")
	s.mustCLI("deploy", writeTree(t, map[string]string{"handler.py": attackerPy}), "--name", "killer", "--runtime", "python3.11")
	warm := func() {
		// The first cold start of a namespace starts its zygote.
		s.waitFor("the warm-up answering", func() bool { code, _, _ := s.post("/fn/default/warmup", `{}`); return code == 200 })
		s.waitFor("the zygote of namespace default running", func() bool { return len(s.zygotes()) > 0 })
		s.waitFor("the killer answering", func() bool { code, _, _ := s.post("/fn/default/killer", `{"mode": "hello"}`); return code == 200 })
		if !s.forked(attackerPy) {
			t.Fatal("the killer's instance was not forked from the zygote")
		}
	}
	warm()
	t.Run("the zygote is not root, and an instance reaches neither it nor a sibling", func(t *testing.T) {
		zygotes := s.zygotes()
		for _, pid := range zygotes {
			if uid := uidOf(pid); uid < 200000 {
				t.Errorf("zygote process %d runs as uid %d, want one of the sandbox's range", pid, uid)
			}
		}
		if code, _, out := s.post("/fn/default/killer", `{"mode": "killall"}`); code != 200 {
			t.Fatalf("killall: %d %s", code, out)
		}
		for _, pid := range zygotes {
			if err := syscall.Kill(pid, 0); err != nil {
				t.Errorf("zygote process %d after an instance killed all it could: %v", pid, err)
			}
		}
		for _, fn := range []string{"killer", "warmup"} {
			if code, _, out := s.post("/fn/default/"+fn, `{"mode": "hello"}`); code != 200 {
				t.Errorf("%s after the killer killed all it could: %d %s", fn, code, out)
			}
		}
	})
	t.Run("no process of a forked instance or a zygote outlives a killed server", func(t *testing.T) {
		marker := fmt.Sprintf("4345.%d", os.Getpid())
		if code, _, out := s.post("/fn/default/killer", fmt.Sprintf(`{"mode": "leave", "marker": %q}`, marker)); code != 200 {
			t.Fatalf("leave: %d %s", code, out)
		}
		s.waitFor("the killer's probe processes running", func() bool { return len(processesWith(marker)) > 0 })
		zygotes := s.zygotes()
		s.crash()
		s.waitFor("the killer's processes gone after the server was killed", func() bool { return len(processesWith(marker)) == 0 })
		s.waitFor("the zygotes gone after the server was killed", func() bool {
			for _, pid := range zygotes {
				if syscall.Kill(pid, 0) == nil {
					return false
				}
			}
			return true
		})
		s.start()
		warm()
	})
	escapeSuite(t, s, true)
}

// requireSandbox ends t unless s's start-up log says its instances are
// sandboxed (in the mode named, if any). A kernel that refuses unprivileged
// user namespaces, or root without the capabilities of the root mode (a
// container), is an unavailable service; any other reason is a failure.
func requireSandbox(t *testing.T, s *server, mode ...string) {
	t.Helper()
	// The server answers before its log has been read to the end.
	s.waitFor("the start-up log saying whether the sandbox is on", func() bool {
		logs := s.logs.String()
		return strings.Contains(logs, "instances and builds are sandboxed") || strings.Contains(logs, "not sandboxed")
	})
	logs := s.logs.String()
	if line := firstLine(logs, "instances and builds are sandboxed"); line != "" {
		for _, m := range mode {
			if !strings.Contains(line, m) {
				t.Fatalf("the sandbox is not in the %s: %s", m, line)
			}
		}
		return
	}
	reason := firstLine(logs, "not sandboxed")
	if strings.Contains(reason, "refuses it a user namespace") || strings.Contains(reason, "runs as root without CAP_") {
		testenv.Unavailable(t, "the server runs without the sandbox here: %s", reason)
	}
	t.Fatalf("the server runs without the sandbox: %s", reason)
}

// escapeSuite deploys a victim and attackers on s and runs every probe;
// with forked, the python ones must have been forked from a zygote.
func escapeSuite(t *testing.T, s *server, forked bool) {
	s.mustCLI("deploy", writeTree(t, map[string]string{"handler.py": victimPy}), "--name", "victim", "--runtime", "python3.11",
		"--env", "SECRET=victim-secret-xyz", "--min-instances", "1")
	s.mustCLI("deploy", writeTree(t, map[string]string{"handler.py": attackerPy}), "--name", "attacker", "--runtime", "python3.11",
		"--timeout", "60", "--memory", "512")
	s.mustCLI("deploy", writeTree(t, map[string]string{"handler.js": attackerJS}), "--name", "attacker-js", "--runtime", "nodejs20",
		"--timeout", "60")
	for _, fn := range []string{"victim", "attacker", "attacker-js"} {
		s.waitFor(fn+" answering", func() bool { code, _, _ := s.post("/fn/default/"+fn, `{"mode": "hello"}`); return code == 200 })
	}
	info := s.sandboxInfo(t)
	for _, code := range []string{victimPy, attackerPy} {
		if forked && !s.forked(code) {
			t.Fatalf("no instance of the code %.40q... was forked from a zygote", code)
		}
	}
	// The build compiled the code ahead, with a compiler confined as pip is.
	if _, err := os.Stat(filepath.Join(info.VictimArtifact, "__pycache__", "handler.cpython-311.pyc")); err != nil {
		t.Errorf("the victim's build compiled nothing ahead: %v\n%s", err, firstLine(s.logs.String(), "compiling the code ahead failed"))
	}

	for _, fn := range []string{"attacker", "attacker-js"} {
		t.Run(fn, func(t *testing.T) {
			body, _ := json.Marshal(info)
			code, _, out := s.post("/fn/default/"+fn, string(body))
			if code != 200 {
				t.Fatalf("probes: %d %s", code, out)
			}
			var results map[string]string
			if err := json.Unmarshal([]byte(out), &results); err != nil || len(results) == 0 {
				t.Fatalf("probes answered %s (%v)", out, err)
			}
			for probe, result := range results {
				t.Logf("%s: %s", probe, result)
				if !strings.HasPrefix(result, "blocked") {
					t.Errorf("%s: %s", probe, result)
				}
			}
			s.checkStillWorking(t, fn)
		})
	}

	t.Run("the environment carries nothing of the server's", func(t *testing.T) {
		for _, fn := range []string{"attacker", "attacker-js"} {
			code, _, out := s.post("/fn/default/"+fn, `{"mode": "env"}`)
			var env map[string]string
			if code != 200 || json.Unmarshal([]byte(out), &env) != nil {
				t.Fatalf("%s env: %d %s", fn, code, out)
			}
			for k, v := range env {
				documented := k == "SLESS_FUNCTION" || k == "SLESS_NAMESPACE"
				if (strings.HasPrefix(k, "SLESS_") && !documented) || strings.Contains(v, "server-canary") || strings.Contains(v, s.token) {
					t.Errorf("%s sees %s=%s", fn, k, v)
				}
			}
			if env["SLESS_FUNCTION"] != fn {
				t.Errorf("%s: SLESS_FUNCTION=%q", fn, env["SLESS_FUNCTION"])
			}
		}
	})

	t.Run("a fork bomb stops at the pids limit", func(t *testing.T) {
		code, _, out := s.post("/fn/default/attacker", `{"mode": "forkbomb"}`)
		t.Logf("fork bomb: %d %s", code, out)
		if code != 200 || !strings.Contains(out, "stopped after") {
			t.Errorf("fork bomb: %d %s; want it stopped by the pids limit", code, out)
		}
		s.checkStillWorking(t, "attacker")
	})

	t.Run("no process outlives a deleted function", func(t *testing.T) {
		for _, fn := range []string{"attacker", "attacker-js"} {
			marker := fmt.Sprintf("%d.%d", 4000+len(fn), os.Getpid()) // sleep takes decimals; unique on the machine
			if code, _, out := s.post("/fn/default/"+fn, fmt.Sprintf(`{"mode": "leave", "marker": %q}`, marker)); code != 200 {
				t.Fatalf("%s: %d %s", fn, code, out)
			}
			// Under load the probe's processes were seen to show in /proc only
			// after the handler answered (rootless mode, 1 run in 4).
			s.waitFor(fn+"'s probe processes running", func() bool { return len(processesWith(marker)) > 0 })
			s.mustCLI("fn", "delete", fn)
			s.waitFor(fn+"'s processes gone", func() bool { return len(processesWith(marker)) == 0 })
		}
		s.checkStillWorking(t, "victim")
	})

	t.Run("no process outlives the server", func(t *testing.T) {
		s.mustCLI("deploy", writeTree(t, map[string]string{"handler.py": attackerPy}), "--name", "leaver", "--runtime", "python3.11")
		for _, end := range []struct {
			how    string
			marker string
			stop   func()
		}{{"stopped", fmt.Sprintf("4343.%d", os.Getpid()), s.stop}, {"killed", fmt.Sprintf("4344.%d", os.Getpid()), s.crash}} {
			s.waitFor("the leaver answering", func() bool { code, _, _ := s.post("/fn/default/leaver", `{"mode": "hello"}`); return code == 200 })
			if code, _, out := s.post("/fn/default/leaver", fmt.Sprintf(`{"mode": "leave", "marker": %q}`, end.marker)); code != 200 {
				t.Fatalf("leaver: %d %s", code, out)
			}
			s.waitFor("the leaver's probe processes running", func() bool { return len(processesWith(end.marker)) > 0 })
			end.stop()
			s.waitFor("the leaver's processes gone after the server "+end.how, func() bool { return len(processesWith(end.marker)) == 0 })
			if end.how == "stopped" {
				s.start()
			}
		}
	})
}

// checkStillWorking fails unless fn and the victim still answer.
func (s *server) checkStillWorking(t *testing.T, fn string) {
	t.Helper()
	if code, _, out := s.post("/fn/default/"+fn, `{"mode": "hello"}`); code != 200 {
		t.Errorf("%s after the probes: %d %s", fn, code, out)
	}
	if code, _, out := s.post("/fn/default/victim", `{}`); code != 200 || out != `"victim ok"` {
		t.Errorf("the victim after the probes: %d %s", code, out)
	}
}

// sandboxInfo collects the paths and pids the probes aim at.
func (s *server) sandboxInfo(t *testing.T) sandboxInfo {
	t.Helper()
	info := sandboxInfo{DataDir: s.opts.dataDir, ServerPid: s.cmd.Process.Pid}
	artifacts, _ := filepath.Glob(filepath.Join(s.opts.dataDir, "artifacts", "*", "handler.py"))
	for _, a := range artifacts {
		if data, err := os.ReadFile(a); err == nil && string(data) == victimPy {
			info.VictimArtifact = filepath.Dir(a)
		}
	}
	if info.VictimArtifact == "" {
		t.Fatal("the victim's artifact is not in the data directory")
	}
	// An instance's memory limit when there are cgroups (v1 or v2), else
	// any cgroup file of the host.
	info.CgroupFile = "/sys/fs/cgroup/cgroup.procs"
	if m := limitsLine.FindStringSubmatch(s.logs.String()); m != nil {
		for _, file := range []string{"memory.limit_in_bytes", "memory.max"} {
			if found, _ := filepath.Glob(filepath.Join(m[1], "*", file)); len(found) > 0 {
				info.CgroupFile = found[0]
			}
		}
	}
	// The server's children (instances it started, zygotes' inits) and
	// their children (forked instances, zygotes, instances' own processes).
	parents := parentsOf()
	for pid, ppid := range parents {
		if ppid == info.ServerPid || parents[ppid] == info.ServerPid {
			info.InstancePids = append(info.InstancePids, pid)
		}
	}
	if len(info.InstancePids) < 3 {
		t.Fatalf("found %d instance processes, want at least 3", len(info.InstancePids))
	}
	// Each instance's socket is in its own mount namespace; the server
	// reaches it through the instance's root.
	for _, pid := range info.InstancePids {
		sock := fmt.Sprintf("/proc/%d/root/run/sless/s.sock", pid)
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			info.Sockets = append(info.Sockets, sock)
		}
	}
	if len(info.Sockets) < 3 {
		t.Fatalf("reached %d instance sockets, want the three functions' and the spares'", len(info.Sockets))
	}
	return info
}

// zygotes returns the pids of the processes of s's zygotes: the inits, the
// server's children that run zygote.py, and the zygotes, their children
// that serve no socket.
func (s *server) zygotes() []int {
	var pids []int
	parents := parentsOf()
	for pid, ppid := range parents {
		if ppid == s.cmd.Process.Pid && isZygote(pid) {
			pids = append(pids, pid)
			for child, parent := range parents {
				if _, err := os.Stat(fmt.Sprintf("/proc/%d/root/run/sless/s.sock", child)); parent == pid && err != nil {
					pids = append(pids, child)
				}
			}
		}
	}
	return pids
}

// forked reports whether an instance forked from one of s's zygotes (a
// child of a zygote's init) runs with code as its handler.py.
func (s *server) forked(code string) bool {
	parents := parentsOf()
	for pid, ppid := range parents {
		if parents[ppid] == s.cmd.Process.Pid && isZygote(ppid) {
			if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/code/handler.py", pid)); err == nil && string(data) == code {
				return true
			}
		}
	}
	return false
}

// isZygote reports whether pid runs the python zygote (a fork of it keeps
// its command line).
func isZygote(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(cmdline), "/zygote.py\x00")
}

// uidOf returns the real uid of pid, -1 when it is gone.
func uidOf(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			uid, _ := strconv.Atoi(strings.Fields(v)[0])
			return uid
		}
	}
	return -1
}

// parentsOf maps every process's pid to its parent's.
func parentsOf() map[int]int {
	parents := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			// "pid (comm) state ppid ..."
			fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
			if len(fields) > 1 {
				parents[pid], _ = strconv.Atoi(fields[1])
			}
		}
	}
	return parents
}

// processesWith returns the pids whose command line has the argument arg.
func processesWith(arg string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), "\x00"+arg+"\x00") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// firstLine returns the first line of text that contains sub.
func firstLine(text, sub string) string {
	for line := range strings.SplitSeq(text, "\n") {
		if strings.Contains(line, sub) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// A dependency install runs user code (npm's install scripts, pip's
// setup.py): it runs as an unprivileged uid (its own in the root mode) and
// reaches nothing of the platform, while its build directory stays writable.
func TestSandboxedBuilds(t *testing.T) {
	for _, unprivileged := range []bool{false, true} {
		t.Run(map[bool]string{false: "as root", true: "rootless"}[unprivileged], func(t *testing.T) {
			s := startServer(t, serverOptions{unprivileged: unprivileged})
			requireSandbox(t, s)
			buildSuite(t, s)
		})
	}
}

// buildSuite deploys a function whose npm install script probes the
// platform.
func buildSuite(t *testing.T, s *server) {
	token := filepath.Join(s.opts.dataDir, "api-token")
	pwned := filepath.Join(s.opts.dataDir, "pwned")
	script := fmt.Sprintf("id -u > uid.txt; (cat %s || echo refused) > token.txt 2>&1; touch %s 2>/dev/null; true", token, pwned)
	pkg, _ := json.Marshal(map[string]any{"name": "probe", "version": "1.0.0", "scripts": map[string]string{"install": script}})
	dir := writeTree(t, map[string]string{
		"package.json": string(pkg),
		"handler.js": `const fs = require("fs");
exports.handle = async () => ({uid: fs.readFileSync("uid.txt", "utf8").trim(), token: fs.readFileSync("token.txt", "utf8").trim()});
`,
	})
	s.mustCLI("deploy", dir, "--name", "build-probe", "--runtime", "nodejs20")
	code, _, out := s.post("/fn/default/build-probe", "")
	var got struct{ UID, Token string }
	if code != 200 || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("invoke: %d %s", code, out)
	}
	if got.UID == "" || got.UID == "0" || got.UID == strconv.Itoa(os.Getuid()) {
		t.Errorf("the install script ran as uid %q", got.UID)
	}
	if strings.Contains(got.Token, s.token) || !strings.Contains(got.Token, "refused") {
		t.Errorf("the install script read the token: %q", got.Token)
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Error("the install script wrote into the data directory")
	}
}
