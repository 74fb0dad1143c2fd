package reconcile_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/functions/fnstore"
	"sless.kube5s.ru/sless/modules/functions/reconcile"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// fakeBuilder records builds and answers with a programmed result.
type fakeBuilder struct {
	mu     sync.Mutex
	builds []build.Request
	err    error
}

func (b *fakeBuilder) Build(ctx context.Context, req build.Request) (build.Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.builds = append(b.builds, req)
	if b.err != nil {
		return build.Result{}, b.err
	}
	return build.Result{Artifact: "/artifacts/" + req.CodeSHA256, Log: "installed"}, nil
}

func (b *fakeBuilder) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.builds)
}

// fakeExecutor records what is deployed.
type fakeExecutor struct {
	mu       sync.Mutex
	deployed map[string]runtime.Target
	// refuse, when set, is Deploy's error.
	refuse error
}

func (e *fakeExecutor) Deploy(_ context.Context, t runtime.Target) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.refuse != nil {
		return e.refuse
	}
	e.deployed[t.Namespace+"/"+t.Name] = t
	return nil
}

func (e *fakeExecutor) Undeploy(_ context.Context, ns, name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.deployed, ns+"/"+name)
	return nil
}

func (e *fakeExecutor) Acquire(context.Context, string, string) (runtime.Lease, error) {
	return nil, runtime.ErrNotDeployed
}

func (e *fakeExecutor) Warm(context.Context, string, string, time.Time) error { return nil }

// fakeSuspension suspends the functions in its set.
type fakeSuspension map[functions.Key]bool

func (s fakeSuspension) Suspended(_ context.Context, key functions.Key) (bool, error) {
	return s[key], nil
}

var suspended fakeSuspension

func (e *fakeExecutor) get(key functions.Key) (runtime.Target, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.deployed[key.String()]
	return t, ok
}

var executor *fakeExecutor

func setup(t *testing.T) (*fnstore.Store, *fakeBuilder, *reconcile.Reconciler, functions.Key) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, _, err := sqldb.Open("sqlite:"+filepath.Join(t.TempDir(), "db"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Close(db) })
	if err := sqldb.Migrate(context.Background(), db, fnstore.Migrations()); err != nil {
		t.Fatal(err)
	}
	store := fnstore.New(db)
	fn, err := store.Create(context.Background(), &functions.Function{Namespace: "default", Name: "f",
		Spec: functions.Spec{Runtime: "python3.11", Handler: "handler.handle", TimeoutSeconds: 30, MemoryMB: 128, MaxInstances: 1, Concurrency: 1}})
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBuilder{}
	executor = &fakeExecutor{deployed: map[string]runtime.Target{}}
	suspended = fakeSuspension{}
	return store, b, reconcile.New(store, b, executor, suspended, time.Minute, log), fn.Key()
}

func reconcileAndGet(t *testing.T, store *fnstore.Store, r *reconcile.Reconciler, key functions.Key) *functions.Function {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), key); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	fn, err := store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return fn
}

func TestPendingWithoutCode(t *testing.T) {
	store, b, r, key := setup(t)
	fn := reconcileAndGet(t, store, r, key)
	if fn.Status.Phase != functions.PhasePending || !strings.Contains(fn.Status.Message, "upload") || b.count() != 0 {
		t.Errorf("got phase %s %q after %d builds; want Pending asking for an upload, no build", fn.Status.Phase, fn.Status.Message, b.count())
	}
}

func TestBuildsOncePerCode(t *testing.T) {
	ctx := context.Background()
	store, b, r, key := setup(t)
	if _, err := store.SetCode(ctx, key, "c1"); err != nil {
		t.Fatal(err)
	}
	fn := reconcileAndGet(t, store, r, key)
	if fn.Status.Phase != functions.PhaseReady || fn.Status.Artifact != "/artifacts/c1" || fn.Status.CodeSHA256 != "c1" ||
		fn.Status.ObservedGeneration != fn.Generation || fn.Status.BuildLog != "installed" {
		t.Fatalf("after the first reconcile: %+v", fn.Status)
	}
	first, ok := executor.get(key)
	if !ok || first.Artifact != "/artifacts/c1" || first.Handler != "handler.handle" {
		t.Fatalf("deployed %+v, %t; want the built artifact", first, ok)
	}
	// Level-based: reconciling again, or after a change that does not touch
	// the code, builds nothing.
	reconcileAndGet(t, store, r, key)
	spec := fn.Spec
	spec.Env = map[string]string{"X": "1"}
	if _, err := store.UpdateSpec(ctx, key, spec); err != nil {
		t.Fatal(err)
	}
	fn = reconcileAndGet(t, store, r, key)
	if b.count() != 1 || fn.Status.ObservedGeneration != fn.Generation || fn.Status.Phase != functions.PhaseReady {
		t.Errorf("after an env change: %d builds, status %+v; want 1 build, Ready, observed", b.count(), fn.Status)
	}
	if second, _ := executor.get(key); second.Version == first.Version || second.Env["X"] != "1" {
		t.Errorf("an env change deployed version %s (was %s) with env %v; want a new version with X=1", second.Version, first.Version, second.Env)
	}
	spec.MaxInstances = 5
	if _, err := store.UpdateSpec(ctx, key, spec); err != nil {
		t.Fatal(err)
	}
	reconcileAndGet(t, store, r, key)
	if third, _ := executor.get(key); third.MaxInstances != 5 {
		t.Errorf("max_instances change not deployed: %+v", third)
	}
	// New code builds again.
	if _, err := store.SetCode(ctx, key, "c2"); err != nil {
		t.Fatal(err)
	}
	fn = reconcileAndGet(t, store, r, key)
	if b.count() != 2 || fn.Status.CodeSHA256 != "c2" {
		t.Errorf("after new code: %d builds, serving %s; want 2 and c2", b.count(), fn.Status.CodeSHA256)
	}
}

func TestFailedBuildIsTerminalUntilChanged(t *testing.T) {
	ctx := context.Background()
	store, b, r, key := setup(t)
	if _, err := store.SetCode(ctx, key, "c1"); err != nil {
		t.Fatal(err)
	}
	reconcileAndGet(t, store, r, key)

	b.err = &build.Error{Msg: "pip install failed: no such package", Log: "ERROR: nope"}
	if _, err := store.SetCode(ctx, key, "c2"); err != nil {
		t.Fatal(err)
	}
	fn := reconcileAndGet(t, store, r, key)
	if fn.Status.Phase != functions.PhaseFailed || fn.Status.BuildLog != "ERROR: nope" ||
		!strings.Contains(fn.Status.Message, "no such package") || !strings.Contains(fn.Status.Message, "still serving code c1") {
		t.Fatalf("after a failed build: %+v", fn.Status)
	}
	if fn.Status.Artifact != "/artifacts/c1" || fn.Status.CodeSHA256 != "c1" {
		t.Errorf("the last good artifact is not kept: %+v", fn.Status)
	}
	reconcileAndGet(t, store, r, key)
	if b.count() != 2 {
		t.Errorf("a failed build was retried without a change: %d builds, want 2", b.count())
	}
	// Uploading the same code again is a change: it retries.
	b.err = nil
	if _, err := store.SetCode(ctx, key, "c2"); err != nil {
		t.Fatal(err)
	}
	fn = reconcileAndGet(t, store, r, key)
	if b.count() != 3 || fn.Status.Phase != functions.PhaseReady || fn.Status.Message != "" {
		t.Errorf("after re-upload: %d builds, %+v; want 3 and Ready", b.count(), fn.Status)
	}
}

func TestInfrastructureErrorsAreNotShown(t *testing.T) {
	ctx := context.Background()
	store, b, r, key := setup(t)
	b.err = errors.New("disk /var/lib/secret-path is full")
	if _, err := store.SetCode(ctx, key, "c1"); err != nil {
		t.Fatal(err)
	}
	fn := reconcileAndGet(t, store, r, key)
	if fn.Status.Phase != functions.PhaseFailed || strings.Contains(fn.Status.Message, "secret-path") || !strings.Contains(fn.Status.Message, "internal error") {
		t.Errorf("got %+v; want Failed with a generic message", fn.Status)
	}
}

func TestDeletedFunctionIsUndeployed(t *testing.T) {
	store, _, r, key := setup(t)
	if _, err := store.SetCode(context.Background(), key, "c1"); err != nil {
		t.Fatal(err)
	}
	reconcileAndGet(t, store, r, key)
	if _, ok := executor.get(key); !ok {
		t.Fatal("not deployed")
	}
	if err := store.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), key); err != nil {
		t.Errorf("Reconcile of a deleted function: %v", err)
	}
	if _, ok := executor.get(key); ok {
		t.Error("a deleted function is still deployed")
	}
}

func TestSuspendedFunctionIsDeployedSuspended(t *testing.T) {
	store, _, r, key := setup(t)
	if _, err := store.SetCode(context.Background(), key, "c1"); err != nil {
		t.Fatal(err)
	}
	suspended[key] = true
	reconcileAndGet(t, store, r, key)
	first, _ := executor.get(key)
	suspended[key] = false
	reconcileAndGet(t, store, r, key)
	second, _ := executor.get(key)
	if !first.Suspended || second.Suspended || first.Version != second.Version {
		t.Errorf("suspended %t then %t, versions %s and %s; want true then false, same version", first.Suspended, second.Suspended, first.Version, second.Version)
	}
}

func TestTargetVersion(t *testing.T) {
	fn := &functions.Function{Namespace: "n", Name: "f", Spec: functions.Spec{Runtime: "python3.11", Handler: "h.h",
		Env: map[string]string{"A": "1", "B": "2"}, TimeoutSeconds: 3, MemoryMB: 128, MaxInstances: 2, Concurrency: 1}}
	base := reconcile.Target(fn, "/a").Version
	same := *fn
	same.Env = map[string]string{"B": "2", "A": "1"}
	same.TimeoutSeconds, same.MinInstances, same.MaxInstances = 60, 1, 9
	same.Egress = "all"
	if v := reconcile.Target(&same, "/a").Version; v != base {
		t.Errorf("timeout and instance counts changed the version")
	}
	for name, mutate := range map[string]func(f *functions.Function){
		"env":         func(f *functions.Function) { f.Env = map[string]string{"A": "1", "B": "3"} },
		"memory":      func(f *functions.Function) { f.MemoryMB = 256 },
		"concurrency": func(f *functions.Function) { f.Concurrency = 2 },
		"handler":     func(f *functions.Function) { f.Handler = "h.g" },
		"egress":      func(f *functions.Function) { f.Egress = "public" },
	} {
		changed := *fn
		mutate(&changed)
		if reconcile.Target(&changed, "/a").Version == base {
			t.Errorf("a change of %s kept the version", name)
		}
	}
	if reconcile.Target(fn, "/b").Version == base {
		t.Error("a new artifact kept the version")
	}
}

// A function the executor cannot run as asked is Failed with the reason and
// not served, and Ready once the executor runs it.
func TestUnsupportedTargetFailsAndIsNotServed(t *testing.T) {
	store, _, r, key := setup(t)
	if _, err := store.SetCode(context.Background(), key, "c1"); err != nil {
		t.Fatal(err)
	}
	reconcileAndGet(t, store, r, key)
	executor.refuse = runtime.Errorf(runtime.ErrUnsupported, `egress "public" is not available`, errors.New("a detail for the log"))
	fn := reconcileAndGet(t, store, r, key)
	if _, ok := executor.get(key); ok || fn.Status.Phase != functions.PhaseFailed ||
		fn.Status.Message != `this server cannot run the function as specified: egress "public" is not available` {
		t.Errorf("refused: phase %s %q, deployed %v; want Failed with the reason, not deployed", fn.Status.Phase, fn.Status.Message, ok)
	}
	executor.refuse = nil
	fn = reconcileAndGet(t, store, r, key)
	if _, ok := executor.get(key); !ok || fn.Status.Phase != functions.PhaseReady || fn.Status.Message != "" {
		t.Errorf("accepted again: phase %s %q, deployed %v; want Ready, deployed", fn.Status.Phase, fn.Status.Message, ok)
	}
}
