package reconcile_test

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/controller"
	"sless.kube5s.ru/sless/modules/build/local"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/functions/fnstore"
	"sless.kube5s.ru/sless/modules/functions/reconcile"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/storage/blobfs"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// minuteRuntime is a runtime whose dependency install (of deps.txt) takes
// a minute, unless its build is cancelled.
type minuteRuntime struct {
	mu                 sync.Mutex
	running, cancelled int
}

func (*minuteRuntime) Name() string                          { return "minute" }
func (*minuteRuntime) DefaultHandler() string                { return "handler.handle" }
func (*minuteRuntime) HandlerFiles(string) ([]string, error) { return []string{"handler.py"}, nil }
func (*minuteRuntime) BaseImage() string                     { return "sless-runtime-minute:v0.1.0" }
func (*minuteRuntime) Wrapper() (string, []byte)             { return "server.py", nil }
func (*minuteRuntime) DependencyFile() string                { return "deps.txt" }
func (*minuteRuntime) Interpreter(context.Context) (string, []string, error) {
	return "", nil, errors.New("not runnable")
}

func (m *minuteRuntime) InstallDependencies(ctx context.Context, _ string, _ io.Writer) error {
	m.mu.Lock()
	m.running++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.running--
		m.mu.Unlock()
	}()
	select {
	case <-time.After(time.Minute):
		return nil
	case <-ctx.Done():
		m.mu.Lock()
		m.cancelled++
		m.mu.Unlock()
		return context.Cause(ctx)
	}
}

// counts returns the installs running and those cancelled.
func (m *minuteRuntime) counts() (running, cancelled int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running, m.cancelled
}

// lockedSuspension is a Suspension that a test changes while workers read it.
type lockedSuspension struct {
	mu  sync.Mutex
	set map[functions.Key]bool
}

func (s *lockedSuspension) Suspended(_ context.Context, key functions.Key) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.set[key], nil
}

// The done-when of the reconcile core: with ten builds in flight that each
// take a minute, another function's create, delete or suspension takes
// effect within a second, and so does the build of a function without
// dependencies. The embedded driver, the local builder and the store are
// the real ones; the runtime's install and the executor are fakes.
func TestTenMinuteLongBuildsHoldNoWorker(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	db, _, err := sqldb.Open("sqlite:"+filepath.Join(dir, "db"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Close(db) })
	if err := sqldb.Migrate(ctx, db, fnstore.Migrations()); err != nil {
		t.Fatal(err)
	}
	store := fnstore.New(db)
	blobs, err := blobfs.New(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	rt := &minuteRuntime{}
	reg, err := runtime.NewRegistry([]runtime.Provider{rt})
	if err != nil {
		t.Fatal(err)
	}
	builder, err := local.New(local.Config{Dir: filepath.Join(dir, "artifacts"), Limits: safezip.DefaultLimits()}, blobs, reg, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := builder.Start(ctx); err != nil {
		t.Fatal(err)
	}
	exec := &fakeExecutor{deployed: map[functions.Key]runtime.Target{}}
	susp := &lockedSuspension{set: map[functions.Key]bool{}}
	var ctrl *controller.Controller[functions.Key]
	rec := reconcile.New(store, builder, exec, susp, func(k functions.Key) { ctrl.Enqueue(k) }, log)
	ctrl = controller.New("functions", rec.Reconcile, store.Keys, 4, log) // as many workers as the server has
	if err := ctrl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := errors.Join(ctrl.Stop(stopCtx), builder.Stop(stopCtx)); err != nil {
			t.Error(err)
		}
	})

	upload := func(files map[string]string) string {
		var buf bytes.Buffer
		w := zip.NewWriter(&buf)
		for name, content := range files {
			f, _ := w.Create(name)
			f.Write([]byte(content))
		}
		w.Close()
		blob, err := blobs.Put(ctx, &buf)
		if err != nil {
			t.Fatal(err)
		}
		return blob.SHA256
	}
	quick := upload(map[string]string{"handler.py": "def handle(e, c): return 1\n"})
	create := func(name, code string) functions.Key {
		fn, err := store.Create(ctx, &functions.Function{Namespace: "default", Name: name, Spec: functions.Spec{
			Runtime: "minute", Handler: "handler.handle", TimeoutSeconds: 30, MemoryMB: 128, MaxInstances: 1, Concurrency: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if code != "" {
			if _, err := store.SetCode(ctx, fn.Key(), code); err != nil {
				t.Fatal(err)
			}
		}
		ctrl.Enqueue(fn.Key())
		return fn.Key()
	}
	status := func(key functions.Key) functions.Status {
		fn, err := store.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return fn.Status
	}
	within := func(d time.Duration, what string, cond func() bool) {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > d {
				t.Fatalf("%s took longer than %s", what, d)
			}
			time.Sleep(2 * time.Millisecond)
		}
		t.Logf("%s took %s", what, time.Since(start).Round(time.Millisecond))
	}

	served, toSuspend := create("served", quick), create("to-suspend", quick)
	within(10*time.Second, "the first builds", func() bool {
		return status(served).Phase == functions.PhaseReady && status(toSuspend).Phase == functions.PhaseReady
	})
	var slow []functions.Key
	for i := range 10 {
		slow = append(slow, create(fmt.Sprintf("slow-%d", i), upload(map[string]string{"handler.py": "x", "deps.txt": fmt.Sprint(i)})))
	}
	within(10*time.Second, "ten builds in flight", func() bool {
		for _, k := range slow {
			if status(k).Phase != functions.PhaseBuilding {
				return false
			}
		}
		running, _ := rt.counts()
		return running == 4 // every install turn is taken
	})

	created := create("created", "")
	within(time.Second, "a create", func() bool {
		st := status(created)
		return st.Phase == functions.PhasePending && st.ObservedGeneration == 1
	})
	if _, err := store.SetCode(ctx, created, quick); err != nil {
		t.Fatal(err)
	}
	ctrl.Enqueue(created)
	within(time.Second, "a build without dependencies", func() bool { return status(created).Phase == functions.PhaseReady })

	if err := store.Delete(ctx, served); err != nil {
		t.Fatal(err)
	}
	ctrl.Enqueue(served)
	within(time.Second, "a delete", func() bool { _, ok := exec.get(served); return !ok })

	susp.mu.Lock()
	susp.set[toSuspend] = true
	susp.mu.Unlock()
	ctrl.Enqueue(toSuspend)
	within(time.Second, "a suspension", func() bool { tg, _ := exec.get(toSuspend); return tg.Suspended })

	for _, k := range slow {
		if st := status(k); st.Phase != functions.PhaseBuilding {
			t.Errorf("%s: phase %s; want its build still running", k, st.Phase)
		}
	}
	// Deleting the functions that build cancels their builds: the four
	// installs running and the six waiting for their turn.
	for _, k := range slow {
		if err := store.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
		ctrl.Enqueue(k)
	}
	within(time.Second, "ten deletes during builds", func() bool { running, cancelled := rt.counts(); return cancelled >= 4 && running == 0 })
}
