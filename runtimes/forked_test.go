package runtimes_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
	"sless.kube5s.ru/sless/runtimes"
)

func TestMain(m *testing.M) {
	// Forked instances run in the sandbox, whose init is this binary.
	sandbox.Init()
	os.Exit(m.Run())
}

// startZygote starts a zygote of rt's wrapper with interp in a sandbox of
// the root mode, and returns it and the wrapper's path as its instances see
// it.
func startZygote(t *testing.T, interp string, rt *wrapperRuntime) (*sandbox.Zygote, string) {
	t.Helper()
	sb, reason, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeAuto})
	if err != nil {
		t.Fatal(err)
	}
	if sb == nil || sb.Rootless() {
		t.Skipf("instances are forked only in the sandbox's root mode (%s)", reason)
	}
	// The zygote's init runs as a uid of the range: its directory's parent
	// must let it pass.
	parent, err := os.MkdirTemp("", "sless-zygote-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o711); err != nil {
		t.Fatal(err)
	}
	var out testenv.SyncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	z, err := sb.StartZygote(ctx, sandbox.ZygoteConfig{Dir: filepath.Join(parent, "z"), Interpreter: interp,
		Program: sandbox.File{Name: "zygote.py", Content: runtimes.PythonZygote}, Wrapper: sandbox.File{Name: rt.scriptName, Content: rt.source},
		Env: sandbox.Env(), Output: &out})
	if err != nil {
		t.Fatalf("starting the zygote: %v; its output: %s", err, out.String())
	}
	t.Cleanup(z.Close)
	return z, "/sless/" + rt.scriptName
}

// fork forks an instance from the suite's zygote, as launch starts one.
func (s *suite) fork(t *testing.T, opt startOptions) *instance {
	t.Helper()
	if len(opt.args) > 0 {
		t.Fatalf("a zygote forks generic instances only, without command-line arguments")
	}
	box, err := s.zygote.NewInstance()
	if err != nil {
		t.Fatal(err)
	}
	var pipes [3][2]*os.File // stdout, stderr, ready
	for i := range pipes {
		if pipes[i][0], pipes[i][1], err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	env := append(append(os.Environ(), startOnlyVar+"=1"), opt.env...)
	f, err := s.zygote.Fork(ctx, box, env, sandbox.ForkFiles{Stdout: pipes[0][1], Stderr: pipes[1][1], Ready: pipes[2][1]})
	for _, p := range pipes {
		p[1].Close()
	}
	if err != nil {
		box.Release()
		t.Fatalf("forking %s: %v", s.rt.label(), err)
	}
	in := &instance{sock: fmt.Sprintf("/proc/%d/root%s", f.Pid, sandbox.SocketPath), exited: make(chan struct{}), ready: pipes[2][0], box: box}
	in.client = in.newClient(nil)
	var copies sync.WaitGroup
	for i, w := range []io.Writer{&in.stdout, &in.stderr} {
		copies.Go(func() { io.Copy(w, pipes[i][0]); pipes[i][0].Close() })
	}
	go func() {
		ws, _ := f.Status()
		copies.Wait()
		in.exitCode = ws.ExitStatus()
		close(in.exited)
	}()
	t.Cleanup(func() {
		f.Signal(syscall.SIGKILL)
		<-in.exited
		in.ready.Close()
		in.client.CloseIdleConnections()
		box.Release()
	})
	return in
}

// skipForked skips a case of the cluster mode's start, from a code dir on
// the command line: a zygote forks generic instances only.
func (s *suite) skipForked(t *testing.T) {
	t.Helper()
	if s.zygote != nil {
		t.Skip("a zygote forks generic instances only, without command-line arguments")
	}
}

// seen returns the path at which the instance sees dir: its code dir is
// /code in a forked instance's sandbox.
func (in *instance) seen(dir string) string {
	if in.box != nil && dir == in.code {
		return sandbox.CodeDir
	}
	return dir
}
