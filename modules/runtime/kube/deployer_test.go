package kube_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.kube5s.ru/sless/internal/names"
	"sless.kube5s.ru/sless/modules/meta"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/kube"
)

const image = "registry.example.com/sless/functions@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// fixture is a Deployer on the shared API server and a function in a
// namespace of its own.
type fixture struct {
	t   *testing.T
	ctx context.Context
	c   client.Client
	d   *kube.Deployer
	// target is what deploy deploys.
	target runtime.Target
}

func newFixture(t *testing.T, opts kube.Options) *fixture {
	t.Helper()
	c := cluster(t)
	d, err := kube.New(c, opts)
	if err != nil {
		t.Fatalf("kube.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return &fixture{t: t, ctx: ctx, c: c, d: d, target: runtime.Target{
		Namespace: newNamespace(), Name: "hello", Version: "v1", Runtime: "python3.11", Artifact: image,
		Handler: "handler.handle", Env: map[string]string{"GREETING": "hi"}, Timeout: 30 * time.Second,
		MemoryMB: 256, MaxInstances: 10, Concurrency: 1, Egress: runtime.EgressAll,
	}}
}

// deploy deploys f.target and fails the test on an error.
func (f *fixture) deploy() runtime.Rollout {
	f.t.Helper()
	r, err := f.d.Deploy(f.ctx, f.target)
	if err != nil {
		f.t.Fatalf("Deploy: %v", err)
	}
	return r
}

// get reads the object of f's namespace named name into obj.
func (f *fixture) get(name string, obj client.Object) {
	f.t.Helper()
	if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: names.Namespace(f.target.Namespace), Name: name}, obj); err != nil {
		f.t.Fatalf("get %s: %v", name, err)
	}
}

func (f *fixture) deployment() *appsv1.Deployment {
	f.t.Helper()
	d := &appsv1.Deployment{}
	f.get(names.Deployment(f.target.Name), d)
	return d
}

// available sets the Deployment's status as the Deployment controller
// would once n pods of its current spec are available: there is no
// controller (or kubelet) in envtest.
func (f *fixture) available(n int32) {
	f.t.Helper()
	f.setStatus(n, n, n)
}

// setStatus sets the Deployment's status as the Deployment controller
// would with replicas pods, updated of them of the current spec, available
// of them available.
func (f *fixture) setStatus(replicas, updated, available int32) {
	f.t.Helper()
	d := f.deployment()
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation,
		Replicas: replicas, UpdatedReplicas: updated, ReadyReplicas: available, AvailableReplicas: available}
	if err := f.c.Status().Update(f.ctx, d); err != nil {
		f.t.Fatalf("update the Deployment's status: %v", err)
	}
}

func wantRollout(t *testing.T, got, want runtime.Rollout) {
	t.Helper()
	if got != want {
		t.Errorf("rollout: got %+v, want %+v", got, want)
	}
}

// child is an object the Deployer makes for a function.
type child struct {
	kind, name string
	obj        func() client.Object
}

// children are the objects of function fn.
func children(fn string) []child {
	return []child{
		{"Deployment", names.Deployment(fn), func() client.Object { return &appsv1.Deployment{} }},
		{"Service", names.Service(fn), func() client.Object { return &corev1.Service{} }},
		{"NetworkPolicy", names.NetworkPolicy(fn), func() client.Object { return &networkingv1.NetworkPolicy{} }},
		{"env Secret", names.EnvSecret(fn), func() client.Object { return &corev1.Secret{} }},
	}
}

func replicasOf(d *appsv1.Deployment) int32 { return ptr.Deref(d.Spec.Replicas, -1) }

func TestDeployRollsOutAndReportsReadiness(t *testing.T) {
	f := newFixture(t, kube.Options{})
	f.target.MinInstances = 2
	wantRollout(t, f.deploy(), runtime.Rollout{Waiting: "the cluster has not started the rollout yet"})

	d := f.deployment()
	if got := replicasOf(d); got != 2 {
		t.Errorf("replicas: got %d, want min_instances 2", got)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != image {
		t.Errorf("image: got %q, want %q", c.Image, image)
	}
	if got := d.Spec.Template.Annotations[kube.AnnotationVersion]; got != "v1" {
		t.Errorf("version annotation: got %q, want v1", got)
	}
	for _, c := range children(f.target.Name) {
		obj := c.obj()
		f.get(c.name, obj)
		if got := obj.GetLabels()[kube.LabelFunction]; got != "hello" {
			t.Errorf("the %s's function label: got %q, want hello", c.kind, got)
		}
	}
	ns := &corev1.Namespace{}
	if err := f.c.Get(f.ctx, client.ObjectKey{Name: names.Namespace(f.target.Namespace)}, ns); err != nil {
		t.Fatalf("get the tenant namespace: %v", err)
	}
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Errorf("namespace's Pod Security enforce level: got %q, want restricted", got)
	}

	// The Deployment controller saw the spec; the pods start.
	f.setStatus(0, 0, 0)
	wantRollout(t, f.deploy(), runtime.Rollout{Waiting: "0 of 2 instances updated"})
	f.setStatus(2, 2, 1)
	wantRollout(t, f.deploy(), runtime.Rollout{Waiting: "1 of 2 instances ready"})
	f.available(2)
	wantRollout(t, f.deploy(), runtime.Rollout{Ready: true})
	if got := f.deployment().Generation; got != d.Generation {
		t.Errorf("deploying the same target again changed the Deployment: generation %d, want %d", got, d.Generation)
	}

	// A new version is a new rollout.
	f.target.Version, f.target.Artifact = "v2", strings.Replace(image, "0123", "4567", 1)
	wantRollout(t, f.deploy(), runtime.Rollout{Waiting: "the cluster has not started the rollout yet"})
	d2 := f.deployment()
	if d2.Generation == d.Generation {
		t.Errorf("a new version left the Deployment at generation %d", d2.Generation)
	}
	if got := d2.Spec.Template.Annotations[kube.AnnotationVersion]; got != "v2" {
		t.Errorf("version annotation: got %q, want v2", got)
	}
	if got := d2.Spec.Template.Spec.Containers[0].Image; got != f.target.Artifact {
		t.Errorf("image: got %q, want %q", got, f.target.Artifact)
	}
	f.setStatus(3, 1, 2) // one new pod, two old ones
	wantRollout(t, f.deploy(), runtime.Rollout{Waiting: "1 of 2 instances updated"})
	f.setStatus(3, 2, 3)
	wantRollout(t, f.deploy(), runtime.Rollout{Waiting: "1 instance of the previous version stopping"})
	f.available(2)
	wantRollout(t, f.deploy(), runtime.Rollout{Ready: true})
}

func TestSuspendScalesToZeroInPlace(t *testing.T) {
	f := newFixture(t, kube.Options{})
	f.target.MinInstances = 2
	f.deploy()
	f.available(2)
	before := f.deployment()

	f.target.Suspended = true
	wantRollout(t, f.deploy(), runtime.Rollout{Waiting: "the cluster has not started the rollout yet"})
	d := f.deployment()
	if d.UID != before.UID {
		t.Errorf("suspending replaced the Deployment (uid %s, was %s); want it scaled in place", d.UID, before.UID)
	}
	if got := replicasOf(d); got != 0 {
		t.Errorf("suspended replicas: got %d, want 0", got)
	}
	if got, want := d.Spec.Template.Annotations, before.Spec.Template.Annotations; !maps.Equal(got, want) {
		t.Errorf("suspending changed the pod template's annotations: got %v, want %v", got, want)
	}
	d.Status.ObservedGeneration = d.Generation // pods still stopping
	if err := f.c.Status().Update(f.ctx, d); err != nil {
		t.Fatal(err)
	}
	wantRollout(t, f.deploy(), runtime.Rollout{Waiting: "2 instances stopping"})
	f.available(0)
	wantRollout(t, f.deploy(), runtime.Rollout{Ready: true})

	f.target.Suspended = false
	f.deploy()
	d = f.deployment()
	if d.UID != before.UID {
		t.Errorf("resuming replaced the Deployment")
	}
	if got := replicasOf(d); got != 2 {
		t.Errorf("resumed replicas: got %d, want min_instances 2", got)
	}
	f.available(2)
	wantRollout(t, f.deploy(), runtime.Rollout{Ready: true})
}

func TestReplicasFollowMinInstances(t *testing.T) {
	tests := []struct {
		min       int
		suspended bool
		want      int32
	}{
		{min: 0, want: 1},
		{min: 1, want: 1},
		{min: 4, want: 4},
		{min: 4, suspended: true, want: 0},
	}
	f := newFixture(t, kube.Options{})
	for _, tc := range tests {
		f.target.MinInstances, f.target.Suspended = tc.min, tc.suspended
		f.deploy()
		if got := replicasOf(f.deployment()); got != tc.want {
			t.Errorf("min_instances %d, suspended %v: got %d replicas, want %d", tc.min, tc.suspended, got, tc.want)
		}
	}
}

func TestEnvAndMemoryChangeTheDeployment(t *testing.T) {
	f := newFixture(t, kube.Options{})
	f.target.Env = map[string]string{"A": "1", "DB_PASSWORD": "s3cret"}
	f.deploy()
	gen := f.deployment().Generation

	envOf := func() map[string]string {
		t.Helper()
		s := &corev1.Secret{}
		f.get(names.EnvSecret(f.target.Name), s)
		env := map[string]string{}
		for k, v := range s.Data {
			env[k] = string(v)
		}
		return env
	}
	if got, want := envOf(), f.target.Env; !maps.Equal(got, want) {
		t.Errorf("env Secret: got %v, want %v", got, want)
	}
	d := f.deployment()
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "DB_PASSWORD" || strings.Contains(e.Value, "s3cret") {
			t.Errorf("the Deployment shows the env: %s=%s", e.Name, e.Value)
		}
	}

	// A variable removed is gone from the Secret, and the pods roll (the
	// version covers the env).
	f.target.Env, f.target.Version = map[string]string{"A": "2"}, "v2"
	f.deploy()
	if got, want := envOf(), f.target.Env; !maps.Equal(got, want) {
		t.Errorf("env Secret after the change: got %v, want %v", got, want)
	}
	d = f.deployment()
	if d.Generation == gen {
		t.Errorf("a change of env left the Deployment at generation %d", gen)
	}
	gen = d.Generation

	f.target.MemoryMB, f.target.Version = 1024, "v3"
	f.deploy()
	d = f.deployment()
	if d.Generation == gen {
		t.Errorf("a change of memory left the Deployment at generation %d", gen)
	}
	want := resource.MustParse("1Gi")
	res := d.Spec.Template.Spec.Containers[0].Resources
	if got := res.Limits[corev1.ResourceMemory]; got.Cmp(want) != 0 {
		t.Errorf("memory limit: got %s, want %s", got.String(), want.String())
	}
	if got := res.Requests[corev1.ResourceMemory]; got.Cmp(want) != 0 {
		t.Errorf("memory request: got %s, want %s", got.String(), want.String())
	}
}

func TestUndeployRemovesTheChildrenAndIsIdempotent(t *testing.T) {
	f := newFixture(t, kube.Options{ImagePullSecret: []byte(`{"auths":{"registry.example.com":{"auth":"dTpw"}}}`)})
	f.deploy()
	key := f.target.Key()
	for _, c := range children(key.Name) {
		f.get(c.name, c.obj())
	}
	for i := range 2 {
		if err := f.d.Undeploy(f.ctx, key); err != nil {
			t.Fatalf("Undeploy #%d: %v", i+1, err)
		}
		for _, c := range children(key.Name) {
			err := f.c.Get(f.ctx, client.ObjectKey{Namespace: names.Namespace(key.Namespace), Name: c.name}, c.obj())
			if !apierrors.IsNotFound(err) {
				t.Errorf("after Undeploy #%d, the %s: got %v, want not found", i+1, c.kind, err)
			}
		}
	}
	// Shared by the namespace's functions: they stay.
	f.get(names.ImagePullSecret, &corev1.Secret{})
	if err := f.d.Undeploy(f.ctx, meta.Key{Namespace: newNamespace(), Name: "never"}); err != nil {
		t.Errorf("Undeploy of a function never deployed, in a namespace that does not exist: %v", err)
	}
}

func TestNamespacesDoNotSeeEachOthersObjects(t *testing.T) {
	a := newFixture(t, kube.Options{})
	b := newFixture(t, kube.Options{})
	b.target.Env = map[string]string{"GREETING": "hello from b"}
	b.target.MinInstances = 3
	a.deploy()
	b.deploy()

	for _, f := range []*fixture{a, b} {
		var deps appsv1.DeploymentList
		if err := f.c.List(f.ctx, &deps, client.InNamespace(names.Namespace(f.target.Namespace))); err != nil {
			t.Fatal(err)
		}
		if len(deps.Items) != 1 || deps.Items[0].Namespace != names.Namespace(f.target.Namespace) {
			t.Errorf("namespace %s holds %d Deployments, want its own one", f.target.Namespace, len(deps.Items))
		}
		s := &corev1.Secret{}
		f.get(names.EnvSecret("hello"), s)
		if got, want := string(s.Data["GREETING"]), f.target.Env["GREETING"]; got != want {
			t.Errorf("namespace %s's env: got GREETING=%q, want %q", f.target.Namespace, got, want)
		}
	}
	if err := a.d.Undeploy(a.ctx, a.target.Key()); err != nil {
		t.Fatal(err)
	}
	if got := replicasOf(b.deployment()); got != 3 {
		t.Errorf("after undeploying the other namespace's function, replicas: got %d, want 3", got)
	}
	for _, c := range children("hello") {
		b.get(c.name, c.obj())
	}
}

// TestPodsMeetTheRestrictedProfile has the API server's Pod Security
// admission judge a pod of the Deployment's template in the tenant
// namespace, and a root pod as a control that it judges at all.
func TestPodsMeetTheRestrictedProfile(t *testing.T) {
	tests := []struct {
		name   string
		opts   kube.Options
		egress runtime.Egress
	}{
		{"defaults", kube.Options{}, runtime.EgressAll},
		{"runtime class, pull secret, public egress",
			kube.Options{RuntimeClassName: "gvisor", ImagePullSecret: []byte(`{"auths":{}}`)}, runtime.EgressPublic},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.opts)
			if tc.opts.RuntimeClassName != "" {
				// Admission refuses a pod whose RuntimeClass is missing.
				rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: tc.opts.RuntimeClassName}, Handler: "runsc"}
				if err := f.c.Create(f.ctx, rc); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			f.target.Egress = tc.egress
			f.deploy()
			tmpl := f.deployment().Spec.Template
			pod := func(mod func(*corev1.PodSpec)) *corev1.Pod {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "check-", Namespace: names.Namespace(f.target.Namespace),
					Labels: tmpl.Labels}, Spec: *tmpl.Spec.DeepCopy()}
				if mod != nil {
					mod(&p.Spec)
				}
				return p
			}
			if err := f.c.Create(f.ctx, pod(nil), client.DryRunAll); err != nil {
				t.Errorf("a pod of the Deployment's template is refused: %v", err)
			}
			root := pod(func(s *corev1.PodSpec) {
				s.SecurityContext.RunAsNonRoot, s.SecurityContext.RunAsUser = nil, ptr.To[int64](0)
				s.Containers[0].SecurityContext.RunAsNonRoot = nil
			})
			err := f.c.Create(f.ctx, root, client.DryRunAll)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
				t.Errorf("a root pod in the tenant namespace: got %v, want refused by PodSecurity", err)
			}
			np := &networkingv1.NetworkPolicy{}
			f.get(names.NetworkPolicy(f.target.Name), np)
			if got, want := slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress), tc.egress == runtime.EgressPublic; got != want {
				t.Errorf("egress %s: the NetworkPolicy restricts egress: got %v, want %v", tc.egress, got, want)
			}
		})
	}
}

func TestDeployRefusesWhatIsNotAnImage(t *testing.T) {
	f := newFixture(t, kube.Options{})
	f.target.Artifact = "/var/lib/sless/artifacts/0123abcd"
	_, err := f.d.Deploy(f.ctx, f.target)
	if !errors.Is(err, runtime.ErrUnsupported) {
		t.Fatalf("Deploy: got %v, want ErrUnsupported", err)
	}
	msg := runtime.PublicMessage(err, "")
	if msg == "" || strings.Contains(msg, "/var/lib") {
		t.Errorf("public message %q: want one that says why without the server's paths", msg)
	}
	err = f.c.Get(f.ctx, client.ObjectKey{Name: names.Namespace(f.target.Namespace)}, &corev1.Namespace{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the refused target's namespace: got %v, want nothing applied", err)
	}
}

func TestInstancesRefuseUntilTheDataPlaneExists(t *testing.T) {
	var in kube.Instances
	key := meta.Key{Namespace: "default", Name: "hello"}
	_, acquireErr := in.Acquire(context.Background(), key)
	warmErr := in.Warm(context.Background(), key, time.Now().Add(time.Minute))
	for what, err := range map[string]error{"Acquire": acquireErr, "Warm": warmErr} {
		if !errors.Is(err, runtime.ErrUnavailable) {
			t.Errorf("%s: got %v, want ErrUnavailable", what, err)
		}
		if got, want := runtime.PublicMessage(err, ""), "invocations are not available in this mode yet"; got != want {
			t.Errorf("%s's public message: got %q, want %q", what, got, want)
		}
	}
}
