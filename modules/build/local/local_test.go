package local_test

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.kube5s.ru/sless/modules/build"
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
}

func newEnv(t *testing.T) env {
	t.Helper()
	blobs, err := blobfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := runtime.NewRegistry([]runtime.Provider{python.New(), nodejs.New()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b, err := local.New(dir, blobs, reg, safezip.DefaultLimits(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return env{builder: b, blobs: blobs, dir: dir}
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
	res, err := e.builder.Build(context.Background(), request(sha))
	if err != nil {
		t.Fatal(err)
	}
	if res.Reused {
		t.Error("first build reported Reused")
	}
	if data, err := os.ReadFile(filepath.Join(res.Artifact, "lib", "util.py")); err != nil || string(data) != "X = 1\n" {
		t.Errorf("artifact content: %q, %v", data, err)
	}
	again, err := e.builder.Build(context.Background(), request(sha))
	if err != nil || !again.Reused || again.Artifact != res.Artifact {
		t.Errorf("second build: %+v, %v; want the same artifact, reused", again, err)
	}
	// Another runtime is another artifact.
	req := request(sha)
	req.Runtime, req.Handler = "nodejs20", "lib/util.X"
	if _, err := e.builder.Build(context.Background(), req); err == nil || !strings.Contains(err.Error(), "lib/util.js") {
		t.Errorf("nodejs build of python code: %v; want an error naming lib/util.js", err)
	}
}

func TestConcurrentBuildsOfSameCodeBuildOnce(t *testing.T) {
	e := newEnv(t)
	sha := e.upload(t, map[string]string{"handler.py": "def handle(e, c): return 1\n"})
	var wg sync.WaitGroup
	results := make(chan build.Result, 8)
	for range 8 {
		wg.Go(func() {
			res, err := e.builder.Build(context.Background(), request(sha))
			if err != nil {
				t.Error(err)
			}
			results <- res
		})
	}
	wg.Wait()
	close(results)
	fresh := 0
	for r := range results {
		if !r.Reused {
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
			_, err := e.builder.Build(context.Background(), request(sha))
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

func TestCancelledBuildLeavesNothing(t *testing.T) {
	e := newEnv(t)
	sha := e.upload(t, map[string]string{"handler.py": "x", "requirements.txt": "./nope-1.0-py3-none-any.whl\n"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.builder.Build(ctx, request(sha))
	if err == nil {
		t.Fatal("cancelled build succeeded")
	}
	entries, _ := os.ReadDir(e.dir)
	if len(entries) != 0 {
		t.Errorf("cancelled build left %d entries", len(entries))
	}
}

func TestRemoveUnused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	keepCode := e.upload(t, map[string]string{"handler.py": "def handle(e, c): return 1"})
	keep, err := e.builder.Build(ctx, request(keepCode))
	if err != nil {
		t.Fatal(err)
	}
	drop, err := e.builder.Build(ctx, request(e.upload(t, map[string]string{"handler.py": "def handle(e, c): return 2"})))
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
	seenUnused := time.Now()
	time.Sleep(10 * time.Millisecond)
	if _, err := e.builder.Build(ctx, request(keepCode)); err != nil {
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
	again, err := e.builder.Build(ctx, request(e.upload(t, map[string]string{"handler.py": "def handle(e, c): return 2"})))
	if err != nil || again.Reused || again.Artifact != drop.Artifact {
		t.Errorf("rebuild after removal: %+v, %v; want a fresh build of %s", again, err, drop.Artifact)
	}
}
