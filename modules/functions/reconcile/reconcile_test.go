package reconcile_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/functions/fnstore"
	"sless.kube5s.ru/sless/modules/functions/reconcile"
	"sless.kube5s.ru/sless/modules/reconciler"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// fakeBuilder builds in the background the way the contract says: the
// first Build of a key starts it (not Done), the next one reports the
// programmed result and forgets it, unless hold keeps it running.
type fakeBuilder struct {
	mu        sync.Mutex
	builds    []build.Request
	running   map[string]string // function -> key
	cancelled []string
	err       error
	hold      bool
	// started is the Progress.Started of running builds.
	started time.Time
}

func (b *fakeBuilder) Build(_ context.Context, req build.Request, _ func()) (build.Progress, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running == nil {
		b.running = map[string]string{}
	}
	fk := req.Namespace + "/" + req.Function
	if k, ok := b.running[fk]; !ok || k != req.Key() {
		if ok {
			b.cancelled = append(b.cancelled, fk)
		}
		b.builds = append(b.builds, req)
		b.running[fk] = req.Key()
		return build.Progress{Started: b.started}, nil
	}
	if b.hold {
		return build.Progress{Started: b.started}, nil
	}
	delete(b.running, fk)
	if b.err != nil {
		return build.Progress{Done: true, Err: b.err}, nil
	}
	return build.Progress{Done: true, Result: build.Result{Artifact: "/artifacts/" + req.Runtime + "/" + req.CodeSHA256, Log: "installed"}}, nil
}

func (b *fakeBuilder) Cancel(_ context.Context, ns, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.running[ns+"/"+name]; ok {
		b.cancelled = append(b.cancelled, ns+"/"+name)
		delete(b.running, ns+"/"+name)
	}
	return nil
}

func (b *fakeBuilder) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.builds)
}

// fakeExecutor records what is deployed; notReady is the Waiting of a
// rollout that is not serving yet.
type fakeExecutor struct {
	mu        sync.Mutex
	deployed  map[functions.Key]runtime.Target
	notReady  string
	deployErr error
}

func (e *fakeExecutor) Deploy(_ context.Context, t runtime.Target) (runtime.Rollout, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.deployErr != nil {
		return runtime.Rollout{}, e.deployErr
	}
	e.deployed[t.Key()] = t
	return runtime.Rollout{Ready: e.notReady == "", Waiting: e.notReady}, nil
}

func (e *fakeExecutor) Undeploy(_ context.Context, key functions.Key) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.deployed, key)
	return nil
}

// fakeSuspension suspends the functions in its set.
type fakeSuspension map[functions.Key]bool

func (s fakeSuspension) Suspended(_ context.Context, key functions.Key) (bool, error) {
	return s[key], nil
}

var suspended fakeSuspension

func (e *fakeExecutor) get(key functions.Key) (runtime.Target, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.deployed[key]
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
	executor = &fakeExecutor{deployed: map[functions.Key]runtime.Target{}}
	suspended = fakeSuspension{}
	return store, b, reconcile.New(store, b, executor, suspended, nil, log), fn.Key()
}

// reconcileAndGet reconciles key until no build runs (a build takes two
// passes: started, then read) and returns the function.
func reconcileAndGet(t *testing.T, store *fnstore.Store, r *reconcile.Reconciler, key functions.Key) *functions.Function {
	t.Helper()
	for range 3 {
		if res := reconcileOnce(t, r, key); res.RequeueAfter == 0 {
			break
		}
	}
	fn, err := store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return fn
}

func reconcileOnce(t *testing.T, r *reconcile.Reconciler, key functions.Key) reconciler.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), key)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return res
}

// conditions returns a status' conditions as "Type=Status/Reason".
func conditions(st functions.Status) []string {
	var out []string
	for _, c := range st.Conditions {
		out = append(out, c.Type+"="+string(c.Status)+"/"+c.Reason)
	}
	return out
}

func TestPendingWithoutCode(t *testing.T) {
	store, b, r, key := setup(t)
	fn := reconcileAndGet(t, store, r, key)
	if fn.Status.Phase != functions.PhasePending || !strings.Contains(fn.Status.Message, "upload") || b.count() != 0 {
		t.Errorf("got phase %s %q after %d builds; want Pending asking for an upload, no build", fn.Status.Phase, fn.Status.Message, b.count())
	}
	if diff := cmp.Diff([]string{"BuildSucceeded=Unknown/NoCode", "Ready=False/NoCode"}, conditions(fn.Status)); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
}

// A build is announced (Building) only once it has run for a while: a quick
// one goes from the phase before it straight to Ready, one status write
// fewer, and a pass in between asks again for when the build should be
// announced.
func TestABuildIsAnnouncedOnlyOnceItRunsAWhile(t *testing.T) {
	ctx := context.Background()
	store, b, r, key := setup(t)
	reconcileOnce(t, r, key)
	if _, err := store.SetCode(ctx, key, "c1"); err != nil {
		t.Fatal(err)
	}
	before, _ := store.Get(ctx, key)
	b.hold, b.started = true, time.Now()
	for range 2 {
		res := reconcileOnce(t, r, key)
		if res.RequeueAfter <= 0 || res.RequeueAfter > time.Second {
			t.Errorf("a pass during a build that just started returned %+v; want a requeue within a second", res)
		}
	}
	if fn, _ := store.Get(ctx, key); !reflect.DeepEqual(fn.Status, before.Status) {
		t.Errorf("status during a build that just started: %+v; want it unwritten: %+v", fn.Status, before.Status)
	}
	b.hold = false
	reconcileOnce(t, r, key)
	fn, _ := store.Get(ctx, key)
	if fn.Status.Phase != functions.PhaseReady || fn.Status.CodeSHA256 != "c1" || fn.Status.ObservedGeneration != fn.Generation {
		t.Errorf("status after a quick build: %+v; want Ready with c1", fn.Status)
	}

	// The next build has run a while by the pass that sees it.
	if _, err := store.SetCode(ctx, key, "c2"); err != nil {
		t.Fatal(err)
	}
	b.hold, b.started = true, time.Now().Add(-time.Minute)
	if res := reconcileOnce(t, r, key); res.RequeueAfter <= time.Second {
		t.Errorf("the pass that announced the build returned %+v; want the build poll", res)
	}
	if fn, _ := store.Get(ctx, key); fn.Status.Phase != functions.PhaseBuilding || fn.Status.ObservedGeneration != fn.Generation {
		t.Errorf("status of a build that runs a while: %+v; want Building, generation %d observed", fn.Status, fn.Generation)
	}
	// Announced, it stays so however recent the builder says it started.
	b.started = time.Now()
	if res := reconcileOnce(t, r, key); res.RequeueAfter <= time.Second {
		t.Errorf("a pass during an announced build returned %+v; want the build poll", res)
	}
}

// A build is started on one pass, which returns with a requeue, and read on
// the next; nothing is deployed before it succeeded.
func TestBuildIsAStateMachineInStatus(t *testing.T) {
	ctx := context.Background()
	store, b, r, key := setup(t)
	if _, err := store.SetCode(ctx, key, "c1"); err != nil {
		t.Fatal(err)
	}
	b.hold = true
	for range 2 {
		if res := reconcileOnce(t, r, key); res.RequeueAfter <= 0 {
			t.Errorf("a pass during the build returned %+v; want a requeue", res)
		}
	}
	fn, _ := store.Get(ctx, key)
	if fn.Status.Phase != functions.PhaseBuilding || fn.Status.BuildKey == "" || b.count() != 1 {
		t.Errorf("during the build: %+v after %d builds; want Building with the build key, one build", fn.Status, b.count())
	}
	if diff := cmp.Diff([]string{"BuildSucceeded=Unknown/Building", "Ready=Unknown/Building"}, conditions(fn.Status)); diff != "" {
		t.Errorf("conditions during the build (-want +got):\n%s", diff)
	}
	if _, ok := executor.get(key); ok {
		t.Error("deployed before the build ended")
	}
	b.hold = false
	if res := reconcileOnce(t, r, key); res.RequeueAfter != 0 {
		t.Errorf("the pass that read the result returned %+v; want no requeue", res)
	}
	fn, _ = store.Get(ctx, key)
	if fn.Status.Phase != functions.PhaseReady {
		t.Errorf("after the build: %+v; want Ready", fn.Status)
	}
	if diff := cmp.Diff([]string{"BuildSucceeded=True/Built", "Ready=True/Serving"}, conditions(fn.Status)); diff != "" {
		t.Errorf("conditions after the build (-want +got):\n%s", diff)
	}
}

func TestBuildsOncePerCode(t *testing.T) {
	ctx := context.Background()
	store, b, r, key := setup(t)
	if _, err := store.SetCode(ctx, key, "c1"); err != nil {
		t.Fatal(err)
	}
	fn := reconcileAndGet(t, store, r, key)
	art := "/artifacts/python3.11/c1"
	if fn.Status.Phase != functions.PhaseReady || fn.Status.Artifact != art || fn.Status.CodeSHA256 != "c1" ||
		fn.Status.ObservedGeneration != fn.Generation || fn.Status.BuildLog != "installed" {
		t.Fatalf("after the first reconcile: %+v", fn.Status)
	}
	first, ok := executor.get(key)
	if !ok || first.Artifact != art || first.Handler != "handler.handle" {
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
	for _, c := range fn.Status.Conditions {
		if c.ObservedGeneration != fn.Generation {
			t.Errorf("condition %s observed generation %d; want %d", c.Type, c.ObservedGeneration, fn.Generation)
		}
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
	if diff := cmp.Diff([]string{"BuildSucceeded=False/BuildFailed", "Ready=False/BuildFailed"}, conditions(fn.Status)); diff != "" {
		t.Errorf("conditions after a failed build (-want +got):\n%s", diff)
	}
	if fn.Status.Artifact != "/artifacts/python3.11/c1" || fn.Status.CodeSHA256 != "c1" {
		t.Errorf("the last good artifact is not kept: %+v", fn.Status)
	}
	if got, _ := executor.get(key); got.Artifact != "/artifacts/python3.11/c1" {
		t.Errorf("deployed %s; want the last good artifact", got.Artifact)
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

// A failed build of a new handler or runtime leaves the function serving
// the last good artifact with the handler and runtime it was built for,
// never with the new spec's, which the artifact may not have (the build
// failed because of that).
func TestFailedBuildKeepsServingTheOldHandlerAndRuntime(t *testing.T) {
	ctx := context.Background()
	store, b, r, key := setup(t)
	if _, err := store.SetCode(ctx, key, "c1"); err != nil {
		t.Fatal(err)
	}
	fn := reconcileAndGet(t, store, r, key)
	good, _ := executor.get(key)
	b.err = &build.Error{Msg: "the handler file is missing"}
	spec := fn.Spec
	spec.Handler, spec.Runtime = "other.handle", "nodejs20"
	spec.Env = map[string]string{"X": "1"}
	if _, err := store.UpdateSpec(ctx, key, spec); err != nil {
		t.Fatal(err)
	}
	if fn = reconcileAndGet(t, store, r, key); fn.Status.Phase != functions.PhaseFailed {
		t.Fatalf("phase %s; want Failed", fn.Status.Phase)
	}
	got, _ := executor.get(key)
	if got.Handler != "handler.handle" || got.Runtime != "python3.11" || got.Artifact != good.Artifact {
		t.Errorf("deployed %s with handler %q and runtime %q; want %s with the handler and runtime it was built for",
			got.Artifact, got.Handler, got.Runtime, good.Artifact)
	}
	if got.Env["X"] != "1" {
		t.Errorf("env %v; want the new spec's (it is not part of the build)", got.Env)
	}
}

// A build of replaced code is cancelled, and its function's deletion
// cancels its build.
func TestStaleBuildsAreCancelled(t *testing.T) {
	ctx := context.Background()
	store, b, r, key := setup(t)
	b.hold = true
	if _, err := store.SetCode(ctx, key, "c1"); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, key)
	if _, err := store.SetCode(ctx, key, "c2"); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, key)
	b.hold = false
	fn := reconcileAndGet(t, store, r, key)
	if fn.Status.CodeSHA256 != "c2" || len(b.cancelled) != 1 || b.count() != 2 {
		t.Errorf("serving %q after %d builds, %d cancelled; want c2, 2 builds, the first cancelled", fn.Status.CodeSHA256, b.count(), len(b.cancelled))
	}
	b.hold = true
	if _, err := store.SetCode(ctx, key, "c3"); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, key)
	if err := store.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, key)
	if len(b.cancelled) != 2 {
		t.Errorf("%d builds cancelled; want the deleted function's too", len(b.cancelled))
	}
}

// Ready waits for the rollout.
func TestReadyWaitsForTheRollout(t *testing.T) {
	ctx := context.Background()
	store, _, r, key := setup(t)
	if _, err := store.SetCode(ctx, key, "c1"); err != nil {
		t.Fatal(err)
	}
	executor.notReady = "0 of 1 instances started"
	reconcileOnce(t, r, key)
	res := reconcileOnce(t, r, key)
	fn, _ := store.Get(ctx, key)
	if res.RequeueAfter <= 0 || fn.Status.Phase != functions.PhaseBuilding || fn.Status.Message != "deploying: 0 of 1 instances started" {
		t.Errorf("while rolling out: %+v, %+v; want Building, deploying, a requeue", res, fn.Status)
	}
	if diff := cmp.Diff([]string{"BuildSucceeded=True/Built", "Ready=Unknown/Deploying"}, conditions(fn.Status)); diff != "" {
		t.Errorf("conditions while rolling out (-want +got):\n%s", diff)
	}
	executor.notReady = ""
	if fn = reconcileAndGet(t, store, r, key); fn.Status.Phase != functions.PhaseReady {
		t.Errorf("after the rollout: %+v; want Ready", fn.Status)
	}
}

// A build's result is recorded even when deploying it fails, so that the
// retry deploys it without building again.
func TestDeployFailureKeepsTheBuild(t *testing.T) {
	ctx := context.Background()
	store, b, r, key := setup(t)
	if _, err := store.SetCode(ctx, key, "c1"); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, key)
	executor.deployErr = errors.New("no room")
	if _, err := r.Reconcile(ctx, key); err == nil {
		t.Fatal("a failed deploy was not reported")
	}
	executor.deployErr = nil
	fn := reconcileAndGet(t, store, r, key)
	if b.count() != 1 || fn.Status.Phase != functions.PhaseReady {
		t.Errorf("after the retry: %d builds, phase %s; want 1 and Ready", b.count(), fn.Status.Phase)
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
	if c := fn.Status.Condition(functions.ConditionBuildSucceeded); c == nil || c.Reason != functions.ReasonBuildError || strings.Contains(c.Message, "secret-path") {
		t.Errorf("BuildSucceeded: %+v; want reason BuildError, no details", c)
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
	st := &functions.Status{Artifact: "/a", ArtifactRuntime: "python3.11", ArtifactHandler: "h.h"}
	base := reconcile.Target(fn, st).Version
	same := *fn
	same.Env = map[string]string{"B": "2", "A": "1"}
	same.TimeoutSeconds, same.MinInstances, same.MaxInstances = 60, 1, 9
	same.Egress = "all"
	same.Handler = "spec.only" // the artifact's handler serves
	if v := reconcile.Target(&same, st).Version; v != base {
		t.Errorf("timeout, instance counts and the spec's handler changed the version")
	}
	for name, mutate := range map[string]func(f *functions.Function){
		"env":         func(f *functions.Function) { f.Env = map[string]string{"A": "1", "B": "3"} },
		"memory":      func(f *functions.Function) { f.MemoryMB = 256 },
		"concurrency": func(f *functions.Function) { f.Concurrency = 2 },
		"egress":      func(f *functions.Function) { f.Egress = "public" },
	} {
		changed := *fn
		mutate(&changed)
		if reconcile.Target(&changed, st).Version == base {
			t.Errorf("a change of %s kept the version", name)
		}
	}
	for name, other := range map[string]functions.Status{
		"artifact": {Artifact: "/b", ArtifactRuntime: "python3.11", ArtifactHandler: "h.h"},
		"handler":  {Artifact: "/a", ArtifactRuntime: "python3.11", ArtifactHandler: "h.g"},
		"runtime":  {Artifact: "/a", ArtifactRuntime: "python3.12", ArtifactHandler: "h.h"},
	} {
		if reconcile.Target(fn, &other).Version == base {
			t.Errorf("a new %s kept the version", name)
		}
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
	executor.deployErr = runtime.Errorf(runtime.ErrUnsupported, `egress "public" is not available`, errors.New("a detail for the log"))
	fn := reconcileAndGet(t, store, r, key)
	if _, ok := executor.get(key); ok || fn.Status.Phase != functions.PhaseFailed ||
		fn.Status.Message != `this server cannot run the function as specified: egress "public" is not available` {
		t.Errorf("refused: phase %s %q, deployed %v; want Failed with the reason, not deployed", fn.Status.Phase, fn.Status.Message, ok)
	}
	executor.deployErr = nil
	fn = reconcileAndGet(t, store, r, key)
	if _, ok := executor.get(key); !ok || fn.Status.Phase != functions.PhaseReady || fn.Status.Message != "" {
		t.Errorf("accepted again: phase %s %q, deployed %v; want Ready, deployed", fn.Status.Phase, fn.Status.Message, ok)
	}
}
