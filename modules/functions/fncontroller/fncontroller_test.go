package fncontroller_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.kube5s.ru/sless/api/v1alpha1"
	"sless.kube5s.ru/sless/internal/names"
	"sless.kube5s.ru/sless/internal/testenv/kubeenv"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/functions/crstore"
	"sless.kube5s.ru/sless/modules/functions/fncontroller"
	"sless.kube5s.ru/sless/modules/functions/fnmetrics"
	"sless.kube5s.ru/sless/modules/reconciler/crdriver"
	"sless.kube5s.ru/sless/modules/runtime/kube"
	"sless.kube5s.ru/sless/modules/triggers"
	trcrstore "sless.kube5s.ru/sless/modules/triggers/crstore"
	trreconcile "sless.kube5s.ru/sless/modules/triggers/reconcile"
)

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m)) }

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// testBuilder builds in the background: a build of a new key is reported
// running on the first call and ends buildTime later, when it notifies.
// Its artifact is an image pinned to a digest of the build key; code whose
// SHA-256 starts with "bad" fails.
type testBuilder struct {
	mu        sync.Mutex
	builds    map[string]*build.Progress
	started   map[string]int
	cancelled map[functions.Key]int
}

const buildTime = 200 * time.Millisecond

func newBuilder() *testBuilder {
	return &testBuilder{builds: map[string]*build.Progress{}, started: map[string]int{}, cancelled: map[functions.Key]int{}}
}

func (b *testBuilder) Build(_ context.Context, req build.Request, notify func()) (build.Progress, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	key := req.Key()
	if p, ok := b.builds[key]; ok {
		return *p, nil
	}
	p := &build.Progress{}
	b.builds[key] = p
	b.started[req.CodeSHA256]++
	time.AfterFunc(buildTime, func() {
		b.mu.Lock()
		p.Done = true
		if strings.HasPrefix(req.CodeSHA256, "bad") {
			p.Err = &build.Error{Msg: "requirements.txt: no such package", Log: "ERROR: no matching distribution"}
		} else {
			p.Result = build.Result{Artifact: image(key)}
		}
		b.mu.Unlock()
		if notify != nil {
			notify()
		}
	})
	return *p, nil
}

func (b *testBuilder) Cancel(_ context.Context, ns, fn string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cancelled[functions.Key{Namespace: ns, Name: fn}]++
	return nil
}

func (b *testBuilder) counts(sha string, key functions.Key) (started, cancelled int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.started[sha], b.cancelled[key]
}

// image is the artifact of build key.
func image(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "registry.example.com/sless/functions@sha256:" + hex.EncodeToString(sum[:])
}

// fixture is a function controller on the test API server, in namespaces
// of the test's own.
type fixture struct {
	t        *testing.T
	env      *kubeenv.Env
	store    *crstore.Store
	triggers *trcrstore.Triggers
	builder  *testBuilder
	prefix   string // of the stores' namespaces
	ns       string // the API namespace
	stop     func()
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	env := kubeenv.Start(t)
	prefix := env.NamespacePrefix(t)
	store, err := crstore.New(env.Client, crstore.Options{NamespacePrefix: prefix, PublicURL: "https://sless.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, env: env, store: store, triggers: trcrstore.NewTriggers(env.Client, trcrstore.Options{NamespacePrefix: prefix}),
		builder: newBuilder(), prefix: prefix, ns: "t-" + strings.ToLower(rand.Text()[:10])}
	f.start()
	t.Cleanup(func() { f.stop() })
	return f
}

// start runs the controller in a manager of its own.
func (f *fixture) start() {
	f.t.Helper()
	deployer, err := kube.New(f.env.Client, kube.Options{})
	if err != nil {
		f.t.Fatal(err)
	}
	mgr, err := crdriver.NewManager(f.env.Config, f.env.Scheme, crdriver.ManagerOptions{}, discard)
	if err != nil {
		f.t.Fatal(err)
	}
	d := fncontroller.New(fncontroller.Params{Store: f.store, Builder: f.builder, Deployer: deployer,
		Suspension: trreconcile.NewSuspension(f.triggers), Phases: fnmetrics.New(), Manager: mgr, Log: discard})
	if err := d.SetupWithManager(mgr); err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	f.stop = func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("the manager stopped with %v", err)
		}
		f.stop = func() {}
	}
}

func (f *fixture) key(name string) functions.Key { return functions.Key{Namespace: f.ns, Name: name} }

func (f *fixture) create(name string) functions.Key {
	f.t.Helper()
	fn := &functions.Function{Name: name, Namespace: f.ns, Spec: functions.Spec{Runtime: "python3.11", Handler: "handler.handle",
		MemoryMB: 128, TimeoutSeconds: 30, MaxInstances: 3, Concurrency: 1}}
	if _, err := f.store.Create(context.Background(), fn); err != nil {
		f.t.Fatal(err)
	}
	return fn.Key()
}

func (f *fixture) setCode(key functions.Key, sha string) {
	f.t.Helper()
	if _, err := f.store.SetCode(context.Background(), key, sha); err != nil {
		f.t.Fatal(err)
	}
}

// eventually polls cond until it returns nil, or fails the test with its
// last error after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %v after %v", what, err, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitPhase waits until key's function is in phase, and returns it.
func (f *fixture) waitPhase(key functions.Key, phase functions.Phase) *functions.Function {
	f.t.Helper()
	return f.waitReady(key, phase, "")
}

// waitReady waits until key's function is in phase, with a Ready condition
// of reason when it is not empty, and returns it.
func (f *fixture) waitReady(key functions.Key, phase functions.Phase, reason string) *functions.Function {
	f.t.Helper()
	var fn *functions.Function
	eventually(f.t, 20*time.Second, fmt.Sprintf("function %s in phase %s %s", key, phase, reason), func() error {
		var err error
		if fn, err = f.store.Get(context.Background(), key); err != nil {
			return err
		}
		c := condition(fn, functions.ConditionReady)
		if fn.Status.Phase != phase || (reason != "" && c.Reason != reason) {
			return fmt.Errorf("phase %s, Ready %s (%s)", fn.Status.Phase, c.Reason, fn.Status.Message)
		}
		return nil
	})
	return fn
}

// deployment returns key's Deployment, once it exists.
func (f *fixture) deployment(key functions.Key) *appsv1.Deployment {
	f.t.Helper()
	d := &appsv1.Deployment{}
	eventually(f.t, 20*time.Second, "the Deployment of "+key.String(), func() error {
		return f.env.Client.Get(context.Background(), f.deploymentName(key), d)
	})
	return d
}

func (f *fixture) deploymentName(key functions.Key) types.NamespacedName {
	return types.NamespacedName{Namespace: names.Namespace(key.Namespace), Name: names.Deployment(key.Name)}
}

// available writes the status of a Deployment whose pods all run its
// current spec, as the Deployment controller would (there is none here).
func (f *fixture) available(key functions.Key) {
	f.t.Helper()
	eventually(f.t, 10*time.Second, "writing the Deployment's status", func() error {
		d := &appsv1.Deployment{}
		if err := f.env.Client.Get(context.Background(), f.deploymentName(key), d); err != nil {
			return err
		}
		n := ptr.Deref(d.Spec.Replicas, 1)
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n,
			ReadyReplicas: n, AvailableReplicas: n}
		return f.env.Client.Status().Update(context.Background(), d)
	})
}

func condition(fn *functions.Function, typ string) functions.Condition {
	if c := fn.Status.Condition(typ); c != nil {
		return *c
	}
	return functions.Condition{}
}

// TestCreateBuildDeployReady follows a function from its creation to Ready:
// Pending without code, Building while its build runs (the build's end,
// notified, is read at once, well before the core's poll), Deploying until
// its Deployment is available, then Ready with its URL; kubectl's columns
// come from the status.
func TestCreateBuildDeployReady(t *testing.T) {
	f := newFixture(t)
	key := f.create("hello")
	fn := f.waitReady(key, functions.PhasePending, functions.ReasonNoCode)
	if c := condition(fn, functions.ConditionReady); c.Status != functions.ConditionFalse {
		t.Errorf("Ready without code: %+v; want False", c)
	}
	var cr v1alpha1.Function
	if err := f.env.Client.Get(context.Background(), types.NamespacedName{Namespace: f.prefix + names.Namespace(key.Namespace), Name: key.Name}, &cr); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cr.Finalizers, fncontroller.Finalizer) {
		t.Errorf("finalizers %v; want %s", cr.Finalizers, fncontroller.Finalizer)
	}

	start := time.Now()
	f.setCode(key, strings.Repeat("a", 64))
	d := f.deployment(key)
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("the Deployment came %v after the upload: the build's end was not read when it was notified", took)
	}
	fn = f.waitReady(key, functions.PhaseBuilding, functions.ReasonDeploying)
	if c := condition(fn, functions.ConditionReady); c.Status != functions.ConditionUnknown {
		t.Errorf("Ready before the Deployment is available: %+v; want Unknown", c)
	}
	want := image(build.Request{Namespace: key.Namespace, Function: key.Name, Runtime: "python3.11", Handler: "handler.handle",
		CodeSHA256: strings.Repeat("a", 64)}.Key())
	if got := d.Spec.Template.Spec.Containers[0].Image; got != want {
		t.Errorf("image %s; want the build's %s", got, want)
	}
	f.available(key)
	fn = f.waitPhase(key, functions.PhaseReady)
	if c := condition(fn, functions.ConditionBuildSucceeded); c.Status != functions.ConditionTrue {
		t.Errorf("BuildSucceeded: %+v; want True", c)
	}
	if err := f.env.Client.Get(context.Background(), types.NamespacedName{Namespace: f.prefix + names.Namespace(key.Namespace), Name: key.Name}, &cr); err != nil {
		t.Fatal(err)
	}
	if cr.Status.Phase != "Ready" || cr.Status.URL != "https://sless.example.com/fn/"+key.Namespace+"/hello" ||
		cr.Status.ObservedGeneration != cr.Generation {
		t.Errorf("the Function's status for kubectl: phase %q, URL %q, observed generation %d of %d",
			cr.Status.Phase, cr.Status.URL, cr.Status.ObservedGeneration, cr.Generation)
	}
	if started, _ := f.builder.counts(strings.Repeat("a", 64), key); started != 1 {
		t.Errorf("the code was built %d times; want once", started)
	}
	// kubectl describe shows each transition as an Event of the Function.
	eventually(t, 10*time.Second, "the Events of the Function", func() error {
		var evs corev1.EventList
		if err := f.env.Client.List(context.Background(), &evs, client.InNamespace(f.prefix+names.Namespace(key.Namespace))); err != nil {
			return err
		}
		var reasons []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Function" && e.InvolvedObject.Name == "hello" && e.InvolvedObject.UID == cr.UID {
				reasons = append(reasons, e.Reason)
			}
		}
		for _, want := range []string{functions.ReasonNoCode, functions.ReasonBuilding, functions.ReasonDeploying, functions.ReasonServing} {
			if !slices.Contains(reasons, want) {
				return fmt.Errorf("reasons %v, no %s", reasons, want)
			}
		}
		return nil
	})
}

// TestCodeUpdateRollsOutANewDigest: new code builds once, and its image
// (another digest) rolls out; the function is Ready again only once the
// new pods are available. A failed build keeps the last good image.
func TestCodeUpdateRollsOutANewDigest(t *testing.T) {
	f := newFixture(t)
	key := f.create("app")
	f.setCode(key, strings.Repeat("1", 64))
	first := f.deployment(key).Spec.Template.Spec.Containers[0].Image
	f.available(key)
	f.waitPhase(key, functions.PhaseReady)

	f.setCode(key, strings.Repeat("2", 64))
	var d *appsv1.Deployment
	eventually(t, 20*time.Second, "the new image in the Deployment", func() error {
		d = f.deployment(key)
		if img := d.Spec.Template.Spec.Containers[0].Image; img == first {
			return errors.New("still the first image")
		}
		return nil
	})
	second := d.Spec.Template.Spec.Containers[0].Image
	if !strings.Contains(second, "@sha256:") {
		t.Errorf("image %s is not pinned by digest", second)
	}
	if fn := f.waitReady(key, functions.PhaseBuilding, functions.ReasonDeploying); !strings.HasPrefix(fn.Status.Message, "deploying") {
		t.Errorf("while the new pods start: %q; want deploying", fn.Status.Message)
	}
	f.available(key)
	f.waitPhase(key, functions.PhaseReady)

	f.setCode(key, "bad"+strings.Repeat("3", 61))
	fn := f.waitPhase(key, functions.PhaseFailed)
	if !strings.Contains(fn.Status.Message, "build failed: requirements.txt: no such package") ||
		!strings.Contains(fn.Status.Message, "still serving code 222222222222") {
		t.Errorf("failed build: %q", fn.Status.Message)
	}
	if img := f.deployment(key).Spec.Template.Spec.Containers[0].Image; img != second {
		t.Errorf("after a failed build the Deployment runs %s; want the last good %s", img, second)
	}
	for _, sha := range []string{strings.Repeat("1", 64), strings.Repeat("2", 64)} {
		if started, _ := f.builder.counts(sha, key); started != 1 {
			t.Errorf("code %s.. was built %d times; want once", sha[:4], started)
		}
	}
}

// TestDisablingTheLastHTTPTriggerScalesToZero: the function follows its
// http triggers in place, through the controller's watch of Triggers.
func TestDisablingTheLastHTTPTriggerScalesToZero(t *testing.T) {
	f := newFixture(t)
	key := f.create("web")
	ctx := context.Background()
	tr := &triggers.Trigger{Name: "web", Namespace: f.ns, Spec: triggers.Spec{Function: "web", Type: triggers.TypeHTTP}}
	if _, err := f.triggers.Create(ctx, tr); err != nil {
		t.Fatal(err)
	}
	f.setCode(key, strings.Repeat("4", 64))
	if n := ptr.Deref(f.deployment(key).Spec.Replicas, -1); n != 1 {
		t.Fatalf("replicas %d; want 1", n)
	}
	replicas := func(want int32) func() error {
		return func() error {
			d := &appsv1.Deployment{}
			if err := f.env.Client.Get(ctx, f.deploymentName(key), d); err != nil {
				return err
			}
			if n := ptr.Deref(d.Spec.Replicas, -1); n != want {
				return fmt.Errorf("%d replicas, want %d", n, want)
			}
			return nil
		}
	}
	spec := tr.Spec
	spec.Enabled = ptr.To(false)
	if _, err := f.triggers.UpdateSpec(ctx, tr.Key(), spec); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "scaled to zero", replicas(0))
	spec.Enabled = ptr.To(true)
	if _, err := f.triggers.UpdateSpec(ctx, tr.Key(), spec); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "scaled back", replicas(1))
}

// TestDeleteCleansUp: a deleted function's children go, then the finalizer
// lets the Function go, also when it was deleted while no controller ran.
func TestDeleteCleansUp(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for i, whileStopped := range []bool{false, true} {
		key := f.create(fmt.Sprintf("gone-%d", i))
		f.setCode(key, strings.Repeat("5", 64))
		f.deployment(key)
		if whileStopped {
			f.stop()
		}
		if err := f.store.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		if whileStopped {
			time.Sleep(500 * time.Millisecond)
			if _, err := f.store.Get(ctx, key); err != nil {
				t.Fatalf("deleted while no controller runs: %v; want the finalizer to hold it", err)
			}
			f.start()
		}
		eventually(t, 20*time.Second, "the Function gone", func() error {
			if _, err := f.store.Get(ctx, key); !errors.Is(err, functions.ErrNotFound) {
				return fmt.Errorf("Get: %v", err)
			}
			return nil
		})
		err := f.env.Client.Get(ctx, f.deploymentName(key), &appsv1.Deployment{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s: the Deployment after the Function is gone: %v; want it deleted", key, err)
		}
		if _, cancelled := f.builder.counts("", key); cancelled == 0 {
			t.Errorf("%s: the build was not cancelled", key)
		}
	}
}
