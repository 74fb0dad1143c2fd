package local_test

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/buildtest"
	"sless.kube5s.ru/sless/modules/build/local"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/nodejs"
	"sless.kube5s.ru/sless/modules/runtime/python"
	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/storage/blobfs"
)

type env struct {
	builder *local.Builder
	blobs   storage.Blobs
	dir     string
	slow    *slowRuntime
}

func newEnv(t *testing.T) env { return newEnvWith(t, local.Config{}) }

// newEnvWith starts a builder of python3.11, nodejs20 and slowRuntime.
func newEnvWith(t *testing.T, c local.Config) env {
	t.Helper()
	blobs, err := blobfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	slow := &slowRuntime{release: make(chan struct{})}
	reg, err := runtime.NewRegistry([]runtime.Provider{python.New(), nodejs.New(), slow})
	if err != nil {
		t.Fatal(err)
	}
	c.Dir, c.Limits = t.TempDir(), safezip.DefaultLimits()
	b, err := local.New(c, blobs, reg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return env{builder: b, blobs: blobs, dir: c.Dir, slow: slow}
}

// build starts req's build, waits for its notification and reads its result.
func (e env) build(t *testing.T, req build.Request) (build.Result, error) {
	t.Helper()
	done := make(chan struct{}, 1)
	notify := func() { done <- struct{}{} }
	p, err := e.builder.Build(context.Background(), req, notify)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Done {
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("no notification of the build's end within a minute")
		}
		if p, err = e.builder.Build(context.Background(), req, nil); err != nil {
			t.Fatal(err)
		}
	}
	if !p.Done {
		t.Fatalf("notified, but the build of %s is not done", req.Function)
	}
	return p.Result, p.Err
}

// slowRuntime is a runtime whose dependency install (of deps.txt) runs
// until release is closed or its context ends.
type slowRuntime struct {
	release chan struct{}

	mu                      sync.Mutex
	running, most, finished int
	cancelled               int
}

func (*slowRuntime) Name() string                          { return "slow" }
func (*slowRuntime) DefaultHandler() string                { return "handler.handle" }
func (*slowRuntime) HandlerFiles(string) ([]string, error) { return []string{"handler.py"}, nil }
func (*slowRuntime) BaseImage() string                     { return "sless-runtime-slow:v0.1.0" }
func (*slowRuntime) Wrapper() (string, []byte)             { return "server.py", nil }
func (*slowRuntime) DependencyFile() string                { return "deps.txt" }
func (*slowRuntime) Interpreter(context.Context) (string, []string, error) {
	return "", nil, errors.New("not runnable")
}

func (s *slowRuntime) InstallDependencies(ctx context.Context, dir string, out io.Writer) error {
	s.mu.Lock()
	s.running++
	s.most = max(s.most, s.running)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running--
		s.mu.Unlock()
	}()
	fmt.Fprintln(out, "installing slowly")
	select {
	case <-s.release:
		s.mu.Lock()
		s.finished++
		s.mu.Unlock()
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		s.cancelled++
		s.mu.Unlock()
		return context.Cause(ctx)
	}
}

// counts returns the installs running, the most that ran at once, and
// those finished and cancelled.
func (s *slowRuntime) counts() (running, most, finished, cancelled int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running, s.most, s.finished, s.cancelled
}

func slowRequest(function, sha string) build.Request {
	return build.Request{Namespace: "default", Function: function, Runtime: "slow", Handler: "handler.handle", CodeSHA256: sha}
}

// Ten slow installs run two at a time (Installs), while a build without
// dependencies finishes at once; every build is notified when it ends.
func TestBuildsRunInTheBackgroundAndInstallsAreBounded(t *testing.T) {
	e := newEnvWith(t, local.Config{Installs: 2})
	notified := make(chan string, 20)
	var reqs []build.Request
	for i := range 10 {
		req := slowRequest(fmt.Sprintf("slow-%d", i), e.upload(t, map[string]string{"handler.py": "x", "deps.txt": fmt.Sprint(i)}))
		reqs = append(reqs, req)
		p, err := e.builder.Build(context.Background(), req, func() { notified <- req.Function })
		if err != nil || p.Done {
			t.Fatalf("Build: %+v, %v; want it running", p, err)
		}
	}
	testenv.Eventually(t, 10*time.Second, "two installs to run", func() bool { r, _, _, _ := e.slow.counts(); return r == 2 })
	quick := e.upload(t, map[string]string{"handler.py": "def handle(e, c): return 1\n"})
	if _, err := e.build(t, request(quick)); err != nil {
		t.Fatalf("a build without dependencies while installs wait: %v", err)
	}
	close(e.slow.release)
	got := map[string]bool{}
	for len(got) < 10 {
		select {
		case name := <-notified:
			got[name] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("notified %d of 10 builds", len(got))
		}
	}
	if _, most, finished, _ := e.slow.counts(); most != 2 || finished != 10 {
		t.Errorf("at most %d installs at once, %d finished; want 2 and 10", most, finished)
	}
	for _, req := range reqs {
		p, err := e.builder.Build(context.Background(), req, nil)
		if err != nil || !p.Done || p.Err != nil || !strings.Contains(p.Result.Log, "installing slowly") {
			t.Errorf("%s: %+v, %v; want done with the install's log", req.Function, p, err)
		}
	}
}

// A build is cancelled by Cancel, by a build of another key for its
// function, and by Stop; a cancelled build never notifies, leaves nothing
// behind, and its result is never reported.
func TestCancelledBuildsAreForgotten(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c1 := e.upload(t, map[string]string{"handler.py": "x", "deps.txt": "1"})
	notified := make(chan string, 10)
	start := func(req build.Request) {
		t.Helper()
		if p, err := e.builder.Build(ctx, req, func() { notified <- req.CodeSHA256 }); err != nil || p.Done {
			t.Fatalf("Build: %+v, %v; want it running", p, err)
		}
	}

	start(slowRequest("f", c1))
	testenv.Eventually(t, 10*time.Second, "the install to run", func() bool { r, _, _, _ := e.slow.counts(); return r == 1 })
	if err := e.builder.Cancel(ctx, "default", "f"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the install to be cancelled", func() bool { _, _, _, c := e.slow.counts(); return c == 1 })

	// New code for the function cancels the build of the old.
	start(slowRequest("f", c1))
	testenv.Eventually(t, 10*time.Second, "the install to run again", func() bool { r, _, _, _ := e.slow.counts(); return r == 1 })
	c2 := e.upload(t, map[string]string{"handler.py": "x"})
	res, err := e.build(t, slowRequest("f", c2))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the old install to be cancelled", func() bool { _, _, _, c := e.slow.counts(); return c == 2 })
	if filepath.Dir(res.Artifact) != e.dir || res.Log != "" {
		t.Errorf("the new code's build: %+v; want an artifact without an install log", res)
	}
	testenv.Eventually(t, 10*time.Second, "only the new code's artifact in the artifact directory", func() bool {
		entries, _ := os.ReadDir(e.dir)
		return len(entries) == 1
	})

	// Stop cancels what runs.
	start(slowRequest("g", c1))
	testenv.Eventually(t, 10*time.Second, "the install to run", func() bool { r, _, _, _ := e.slow.counts(); return r == 1 })
	if err := e.builder.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, _, c := e.slow.counts(); c != 3 {
		t.Errorf("%d installs cancelled after Stop; want 3", c)
	}
	// Stop waited for every build: one that notifies has done so.
	select {
	case sha := <-notified:
		t.Errorf("a cancelled build of %s notified", sha)
	default:
	}
	if _, err := e.builder.Build(ctx, slowRequest("g", c1), nil); err == nil {
		t.Error("a stopped builder accepted a build")
	}
}

func TestBuildTimeout(t *testing.T) {
	e := newEnvWith(t, local.Config{Timeout: 200 * time.Millisecond})
	_, err := e.build(t, slowRequest("f", e.upload(t, map[string]string{"handler.py": "x", "deps.txt": "1"})))
	be, ok := build.AsError(err)
	if !ok || !strings.Contains(be.Msg, "the build took longer than 200ms") || !strings.Contains(be.Log, "installing slowly") {
		t.Errorf("got %v; want a *build.Error saying the build took longer than 200ms, with the log", err)
	}
}

func (e env) upload(t *testing.T, files map[string]string) string {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for name, content := range files {
		f, _ := w.Create(name)
		f.Write([]byte(content))
	}
	w.Close()
	blob, err := e.blobs.Put(context.Background(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	return blob.SHA256
}

func request(sha string) build.Request {
	return build.Request{Namespace: "default", Function: "f", Runtime: "python3.11", Handler: "handler.handle", CodeSHA256: sha}
}

func TestBuildExtractsAndReuses(t *testing.T) {
	e := newEnv(t)
	sha := e.upload(t, map[string]string{"handler.py": "def handle(e, c): return 1\n", "lib/util.py": "X = 1\n"})
	res, err := e.build(t, request(sha))
	if err != nil {
		t.Fatal(err)
	}
	if res.Reused {
		t.Error("first build reported Reused")
	}
	if data, err := os.ReadFile(filepath.Join(res.Artifact, "lib", "util.py")); err != nil || string(data) != "X = 1\n" {
		t.Errorf("artifact content: %q, %v", data, err)
	}
	// The python modules are compiled ahead (python.Provider.Precompile).
	for _, pyc := range []string{"__pycache__/handler.cpython-311.pyc", "lib/__pycache__/util.cpython-311.pyc"} {
		if _, err := os.Stat(filepath.Join(res.Artifact, pyc)); err != nil {
			t.Errorf("the artifact has no %s: %v", pyc, err)
		}
	}
	again, err := e.build(t, request(sha))
	if err != nil || !again.Reused || again.Artifact != res.Artifact {
		t.Errorf("second build: %+v, %v; want the same artifact, reused", again, err)
	}
	// Another runtime is another artifact.
	req := request(sha)
	req.Runtime, req.Handler = "nodejs20", "lib/util.X"
	if _, err := e.build(t, req); err == nil || !strings.Contains(err.Error(), "lib/util.js") {
		t.Errorf("nodejs build of python code: %v; want an error naming lib/util.js", err)
	}
}

// Functions with the same code share one artifact, built once.
func TestConcurrentBuildsOfSameCodeBuildOnce(t *testing.T) {
	e := newEnv(t)
	sha := e.upload(t, map[string]string{"handler.py": "def handle(e, c): return 1\n"})
	notified := make(chan struct{}, 8)
	var reqs []build.Request
	for i := range 8 {
		req := request(sha)
		req.Function = fmt.Sprintf("f%d", i)
		reqs = append(reqs, req)
		if _, err := e.builder.Build(context.Background(), req, func() { notified <- struct{}{} }); err != nil {
			t.Fatal(err)
		}
	}
	for range 8 {
		select {
		case <-notified:
		case <-time.After(10 * time.Second):
			t.Fatal("not every build notified")
		}
	}
	fresh := 0
	for _, req := range reqs {
		p, err := e.builder.Build(context.Background(), req, nil)
		if err != nil || !p.Done || p.Err != nil {
			t.Fatalf("%s: %+v, %v", req.Function, p, err)
		}
		if !p.Result.Reused {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("%d of 8 concurrent builds built; want 1", fresh)
	}
}

func TestBuildErrorsAreForTheUser(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name  string
		files map[string]string
		sha   string
		want  string
	}{
		{name: "handler missing", files: map[string]string{"app/handler.py": "x"}, want: `the handler file is missing: handler "handler.handle" needs handler.py or handler/__init__.py in the uploaded code, which has at its top level: app/`},
		{name: "zip slip", files: map[string]string{"handler.py": "x", "../../evil.py": "x"}, want: `"../../evil.py"`},
		{name: "missing blob", sha: strings.Repeat("ab", 32), want: "missing from the blob store"},
		{name: "pip failure quotes pip", files: map[string]string{"handler.py": "x", "requirements.txt": "./nope-1.0-py3-none-any.whl\n"},
			want: "installing dependencies from requirements.txt failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sha := tt.sha
			if sha == "" {
				sha = e.upload(t, tt.files)
			}
			_, err := e.build(t, request(sha))
			be, ok := build.AsError(err)
			if !ok || !strings.Contains(be.Msg, tt.want) {
				t.Fatalf("got %v; want a *build.Error containing %q", err, tt.want)
			}
			entries, _ := os.ReadDir(e.dir)
			for _, en := range entries {
				if strings.HasPrefix(en.Name(), ".tmp-") {
					t.Errorf("failed build left %s behind", en.Name())
				}
			}
		})
	}
}

func TestRemoveUnused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	keepCode := e.upload(t, map[string]string{"handler.py": "def handle(e, c): return 1"})
	keep, err := e.build(t, request(keepCode))
	if err != nil {
		t.Fatal(err)
	}
	drop, err := e.build(t, request(e.upload(t, map[string]string{"handler.py": "def handle(e, c): return 2"})))
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(e.dir, ".tmp-123"), 0o755) // a build in progress is no artifact
	artifacts, err := e.builder.Artifacts(ctx)
	slices.Sort(artifacts)
	want := []string{keep.Artifact, drop.Artifact}
	slices.Sort(want)
	if err != nil || !slices.Equal(artifacts, want) {
		t.Fatalf("Artifacts() = %q, %v; want %q", artifacts, err, want)
	}

	// Returned by a Build at or after the time it was seen unused: kept.
	// Both were last returned an hour ago, whatever the file system's
	// timestamp granularity.
	seenUnused := time.Now().Add(-30 * time.Minute)
	for _, a := range []string{keep.Artifact, drop.Artifact} {
		if err := os.Chtimes(a, seenUnused.Add(-30*time.Minute), seenUnused.Add(-30*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.build(t, request(keepCode)); err != nil {
		t.Fatal(err)
	}
	if removed, err := e.builder.RemoveUnused(ctx, keep.Artifact, seenUnused); removed || err != nil {
		t.Errorf("RemoveUnused of an artifact a Build returned since = %t, %v; want kept", removed, err)
	}
	if removed, err := e.builder.RemoveUnused(ctx, drop.Artifact, seenUnused); !removed || err != nil {
		t.Errorf("RemoveUnused of an unused artifact = %t, %v; want removed", removed, err)
	}
	if _, err := os.Stat(drop.Artifact); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed artifact still there: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(e.dir, ".tmp-removed-*")); len(left) != 0 {
		t.Errorf("left behind: %q", left)
	}
	if removed, err := e.builder.RemoveUnused(ctx, drop.Artifact, seenUnused); removed || err != nil {
		t.Errorf("RemoveUnused of a removed artifact = %t, %v; want false, nil", removed, err)
	}
	if _, err := e.builder.RemoveUnused(ctx, filepath.Join(e.dir, "..", "etc"), seenUnused); err == nil {
		t.Error("RemoveUnused accepted a path outside the builder's artifacts")
	}

	// Its code deployed again, the artifact is built again.
	again, err := e.build(t, request(e.upload(t, map[string]string{"handler.py": "def handle(e, c): return 2"})))
	if err != nil || again.Reused || again.Artifact != drop.Artifact {
		t.Errorf("rebuild after removal: %+v, %v; want a fresh build of %s", again, err, drop.Artifact)
	}
}

func TestConformance(t *testing.T) {
	buildtest.Run(t, func(t *testing.T) buildtest.Env {
		e := newEnv(t)
		return buildtest.Env{Builder: e.builder, Blobs: e.blobs}
	})
}
