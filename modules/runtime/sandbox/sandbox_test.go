package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Init()
	if os.Getenv(noUserNSEnv) != "" {
		if err := forbidUserNamespaces(); err != nil {
			fmt.Fprintln(os.Stderr, "forbidding user namespaces:", err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}

// noUserNSEnv, set, makes the test binary, started as uid 0 of a user
// namespace of its own (by TestRequireRefusesWithoutUserNamespaces), forbid
// user namespaces below its own and become UnprivilegedUID there.
const noUserNSEnv = "SLESS_TEST_NO_USER_NAMESPACES"

func forbidUserNamespaces() error {
	if err := os.WriteFile("/proc/sys/user/max_user_namespaces", []byte("0"), 0); err != nil {
		return err
	}
	if err := syscall.Setgid(testenv.UnprivilegedUID); err != nil {
		return err
	}
	return syscall.Setuid(testenv.UnprivilegedUID)
}

// Where the kernel refuses an unprivileged user a user namespace (here:
// user.max_user_namespaces is 0 in the namespace the test runs in), auto
// runs unconfined and says why, and require refuses with that reason.
func TestRequireRefusesWithoutUserNamespaces(t *testing.T) {
	if os.Getenv(noUserNSEnv) == "" {
		if os.Geteuid() != 0 {
			t.Skip("needs root to start a user namespace with its own limit")
		}
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(testenv.UnprivilegedCopy(t, exe), "-test.run", "^TestRequireRefusesWithoutUserNamespaces$", "-test.v", "-test.count=1")
		cmd.Dir = testenv.UnprivilegedDir(t)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=" + cmd.Dir, noUserNSEnv + "=1"}
		ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: testenv.UnprivilegedUID, HostID: testenv.UnprivilegedUID, Size: 1}}
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: ids, GidMappings: ids,
			GidMappingsEnableSetgroups: true, Credential: &syscall.Credential{Groups: []uint32{}}, Pdeathsig: syscall.SIGKILL}
		out, err := cmd.CombinedOutput()
		t.Logf("in a user namespace without nested ones:\n%s", out)
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("the test failed there: %v", err)
		}
		return
	}
	want := []string{"runs as uid " + strconv.Itoa(testenv.UnprivilegedUID) + ", not root", "the kernel refuses it a user namespace",
		"sysctl user.max_user_namespaces is 0"}
	sb, reason, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeAuto})
	t.Logf("auto: %s", reason)
	for _, w := range want {
		if sb != nil || err != nil || !strings.Contains(reason, w) {
			t.Errorf("auto: %v, %q, %v; want no sandbox and a reason with %q", sb, reason, err, w)
		}
	}
	sb, _, err = sandbox.New(sandbox.Config{Mode: sandbox.ModeRequire})
	if sb != nil || err == nil || !strings.Contains(err.Error(), "required but unavailable: "+reason) {
		t.Errorf("require: %v, %v; want the refusal %q", sb, err, reason)
	}
}

// newSandbox returns the sandbox of the mode the test process's privileges
// allow; a machine without one is an unavailable service.
func newSandbox(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	sb, reason, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeAuto})
	if err != nil {
		t.Fatal(err)
	}
	if sb == nil {
		testenv.Unavailable(t, "no sandbox here: %s", reason)
	}
	return sb
}

// The mode follows the privileges: root gets its own uids, anyone else a
// user namespace; the start-up description names it.
func TestModeMatchesPrivilege(t *testing.T) {
	sb := newSandbox(t)
	want := "root mode: own uid per process"
	if os.Geteuid() != 0 {
		want = "rootless mode: user namespace per process as the server's uid " + strconv.Itoa(os.Geteuid())
	}
	if got := sb.Describe(); !strings.HasPrefix(got, want) || sb.Rootless() != (os.Geteuid() != 0) {
		t.Errorf("Describe() = %q, Rootless() = %v; want %q...", got, sb.Rootless(), want)
	}
}

// rootlessTests are the tests TestRootless runs again as an unprivileged
// user.
const rootlessTests = "^(TestModeMatchesPrivilege|TestInstanceSeesOnlyItsOwnWorld|TestConfineRunsAToolInItsDirectory|" +
	"TestCodeMountedAfterStartAppears|TestDialerRefusesASymlinkedSocket)$"

// TestRootless runs the sandbox's tests again in a copy of the test binary
// started as an unprivileged user: the rootless mode must confine as well.
func TestRootless(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the tests run unprivileged already")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.UnprivilegedCopy(t, exe), "-test.run", rootlessTests, "-test.v", "-test.count=1")
	cmd.Dir = testenv.UnprivilegedDir(t)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=" + cmd.Dir, testenv.EnvRequireServices + "=" + os.Getenv(testenv.EnvRequireServices)}
	cmd.SysProcAttr = testenv.AsUnprivileged()
	out, err := cmd.CombinedOutput()
	t.Logf("as uid %d:\n%s", testenv.UnprivilegedUID, out)
	switch {
	case err != nil:
		t.Fatalf("the tests failed as an unprivileged user: %v", err)
	case strings.Contains(string(out), "--- SKIP"):
		t.Skip("the rootless sandbox is unavailable here (see above)")
	}
}

// shell runs script with /bin/sh in a fresh instance sandbox whose code is
// dir, and returns its output.
func shell(t *testing.T, sb *sandbox.Sandbox, code, script string) (string, error) {
	t.Helper()
	in, err := sb.NewInstance(filepath.Join(t.TempDir(), "i"), code)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Release()
	if err := in.MountCode(code); err != nil {
		t.Fatal(err)
	}
	cmd := in.Command("/bin/sh", []string{"-c", script}, sandbox.Env(), nil)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// confinementCase is a shell script run in an instance and the output it
// must give ("" for the uid check: any but 0).
type confinementCase struct {
	name, script, want string
}

// confinementCases are what every instance's sandbox must give, started by
// the init or forked by a zygote alike: code holds f, "x", and handler.py;
// secret is a file of the host.
func confinementCases(secret string) []confinementCase {
	return []confinementCase{
		{"runs as an unprivileged uid", "id -u", ""},
		{"reads its code", "cat /code/f", "x"},
		{"cannot write its code", "(echo y > /code/handler.py) 2>/dev/null && echo wrote || echo refused", "refused"},
		{"cannot create files in its code", "touch /code/new 2>/dev/null && echo wrote || echo refused", "refused"},
		{"writes its tmp", "echo y > /tmp/f && cat /tmp/f", "y"},
		{"cannot write outside tmp", "touch /etc/x /usr/x /x 2>/dev/null && echo wrote || echo refused", "refused"},
		{"does not see the host's files", "cat " + secret + " 2>/dev/null || echo missing", "missing"},
		{"cannot mount", "mount -t tmpfs none /tmp 2>/dev/null && echo mounted || echo refused", "refused"},
		{"cannot create namespaces", "unshare -U true 2>/dev/null && echo unshared || echo refused", "refused"},
		{"has no_new_privs and a filter", "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status | tr -s ' \\t' ' '", "NoNewPrivs: 1\nSeccomp: 2"},
		{"has no capabilities", "grep -E '^Cap(Prm|Eff|Amb)' /proc/self/status | tr -d ' \\t' | tr '\\n' ' '",
			"CapPrm:0000000000000000 CapEff:0000000000000000 CapAmb:0000000000000000"},
		{"cannot fill its socket directory", "dd if=/dev/zero of=/run/sless/f bs=1k count=1024 2>/dev/null && echo filled || echo refused", "refused"},
	}
}

// checkConfinement runs the cases with run and checks their output.
func checkConfinement(t *testing.T, cases []confinementCase, run func(t *testing.T, script string) string) {
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.TrimSpace(run(t, tt.script))
			if tt.want == "" {
				if got == "0" || got == "" {
					t.Errorf("uid %q, want an unprivileged one", got)
				}
				return
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// writeCode returns a code directory with handler.py and f, "x".
func writeCode(t *testing.T, handler string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{"handler.py": handler, "f": "x"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// hostSecret writes a file of the host no instance may read.
func hostSecret(t *testing.T) string {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	return secret
}

func TestInstanceSeesOnlyItsOwnWorld(t *testing.T) {
	sb := newSandbox(t)
	code := writeCode(t, "x")
	cases := append(confinementCases(hostSecret(t)),
		confinementCase{"is pid 1 of its own pid namespace", "echo $$", "1"},
		confinementCase{"sees only its own processes", "cat /proc/1/comm; cat /proc/[0-9]*/comm | grep -c sandbox.test || true", "sh\n0"},
		confinementCase{"has an empty environment but the documented one", "env | sort | tr '\\n' ' '",
			"HOME=/tmp LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PWD=/tmp TMPDIR=/tmp"})
	checkConfinement(t, cases, func(t *testing.T, script string) string {
		got, err := shell(t, sb, code, script)
		if err != nil {
			t.Fatalf("%v: %s", err, got)
		}
		return got
	})
}

func TestConfineRunsAToolInItsDirectory(t *testing.T) {
	sb := newSandbox(t)
	dir := t.TempDir()
	cmd := exec.Command("/bin/sh", "-c", "id -u > out; touch /tmp/x; touch "+filepath.Dir(dir)+"/escape 2>/dev/null; echo ok")
	cmd.Dir = dir
	release, err := sb.Confine(cmd, dir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	release()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("%v: %s", err, out)
	}
	uid, err := os.ReadFile(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.TrimSpace(string(uid)); s == "0" || s == "" {
		t.Errorf("the tool ran as uid %q", s)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape")); err == nil {
		t.Error("the tool wrote outside its directory")
	}
	st, err := os.Stat(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Geteuid() {
		t.Errorf("after the tool, its output is owned by uid %d, want the server's %d", uid, os.Geteuid())
	}
}

// A spare is started before its function is known: code mounted after the
// process started must appear in it, read-only. (In the rootless mode its
// init waits for the code, and the program starts only then.)
func TestCodeMountedAfterStartAppears(t *testing.T) {
	sb := newSandbox(t)
	code := t.TempDir()
	if err := os.WriteFile(filepath.Join(code, "f"), []byte("late"), 0o644); err != nil {
		t.Fatal(err)
	}
	if sb.Rootless() {
		// Given at start, the code is the instance's for good.
		in, err := sb.NewInstance(filepath.Join(t.TempDir(), "i"), code)
		if err != nil {
			t.Fatal(err)
		}
		if err := in.MountCode(t.TempDir()); err == nil {
			t.Error("a rootless instance took other code than its own")
		}
		in.Release()
	}
	in, err := sb.NewInstance(filepath.Join(t.TempDir(), "i"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Release()
	script := "for i in $(seq 300); do if [ -e /code/f ]; then cat /code/f; echo; readlink /proc/self/fd/0; touch /code/g 2>/dev/null && echo writable; exit 0; fi; sleep 0.1; done; echo missing"
	cmd := in.Command("/bin/sh", []string{"-c", script}, sandbox.Env(), nil)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := in.MountCode(code); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if got := strings.TrimSpace(out.String()); got != "late\n/dev/null" {
		t.Errorf("got %q, want the code, read-only, and /dev/null as stdin", got)
	}
}

// An instance owns its socket directory: a symlink it leaves there in place
// of its socket must not lead the server to a socket of the host.
func TestDialerRefusesASymlinkedSocket(t *testing.T) {
	sb := newSandbox(t)
	host := filepath.Join(t.TempDir(), "host.sock")
	ln, err := net.Listen("unix", host)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code := t.TempDir()
	in, err := sb.NewInstance(filepath.Join(t.TempDir(), "i"), code)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Release()
	cmd := in.Command("/bin/sh", []string{"-c", "ln -s " + host + " " + sandbox.SocketPath + " && echo linked && exec sleep 60"}, sandbox.Env(), nil)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line := make([]byte, len("linked\n"))
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "linked\n" {
		t.Fatalf("the instance did not make its link: %q, %v", line, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := sandbox.Dialer(cmd.Process.Pid, cmd.Process)(ctx); err == nil {
		c.Close()
		t.Error("the dialer connected through the instance's symlink")
	} else if !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("dial: %v; want a refusal of the symlink", err)
	}
	// A unix connect returns once its connection is queued on the
	// listener, so one the dialer made would be there to accept now.
	raw, err := ln.(*net.UnixListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	err = raw.Control(func(fd uintptr) {
		// The listener is non-blocking: EAGAIN when nothing is queued.
		if nfd, _, err := syscall.Accept(int(fd)); err == nil {
			syscall.Close(nfd)
			t.Error("the host's socket was reached")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}
