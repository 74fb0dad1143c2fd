package deploy

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.kube5s.ru/sless/internal/names"
	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/internal/testenv/kubeenv"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/kaniko"
	kanikosettings "sless.kube5s.ru/sless/modules/build/kaniko/settings"
)

func TestMain(m *testing.M) {
	code := kubeenv.Main(m)
	if binary.dir != "" {
		os.RemoveAll(binary.dir)
	}
	os.Exit(code)
}

// fieldOwner applies what the tests apply for real.
const fieldOwner = "deploy-test"

// strict refuses unknown and duplicate fields, as kubectl apply does.
const strict = client.FieldValidation("Strict")

// applyForReal applies o with server-side apply.
func applyForReal(ctx context.Context, c client.Client, o *unstructured.Unstructured) error {
	return c.Patch(ctx, o.DeepCopy(), client.Apply, client.FieldOwner(fieldOwner), client.ForceOwnership, strict)
}

// TestServerSideDryRun: the API server accepts every object of every
// install, as `kubectl apply -k` sends them to a new cluster, in its
// order: each is created with a server-side dry run (validation, defaulting, admission),
// after the namespaces, which are created for real since a dry run
// leaves nothing for the objects in them. The CRDs, which the test server
// already has, are applied instead, as an upgrade applies them. Then a pod
// of every workload's template is judged by the Pod Security admission of
// its namespace, and, as controls, a root pod in sless is refused and a
// kaniko build pod admitted where the install runs builds.
func TestServerSideDryRun(t *testing.T) {
	env := kubeenv.Start(t)
	c := env.Client
	for _, r := range renderAll(t) {
		t.Run(r.name, func(t *testing.T) {
			ctx := t.Context()
			for _, ns := range r.ofKind("Namespace") {
				if err := applyForReal(ctx, c, ns); err != nil {
					t.Fatalf("namespace %s: %v", ns.GetName(), err)
				}
			}
			for _, o := range r.objs { // in kubectl's order: CRDs first
				if o.GetKind() == "Namespace" {
					continue
				}
				// Strict, as kubectl validates: an unknown or duplicate field
				// is an error, not a warning.
				err := c.Create(ctx, o.DeepCopy(), client.DryRunAll, client.FieldOwner(fieldOwner), strict)
				if apierrors.IsAlreadyExists(err) {
					err = c.Patch(ctx, o.DeepCopy(), client.Apply, client.DryRunAll, client.FieldOwner(fieldOwner), client.ForceOwnership, strict)
				}
				if err != nil {
					t.Errorf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
			templates := podTemplates(t, r)
			for _, pt := range templates {
				if err := c.Create(ctx, podOf(pt), client.DryRunAll); err != nil {
					t.Errorf("a pod of %s: %v", pt.owner, err)
				}
			}

			d, _ := slessPods(t, r)
			root := podOf(podTemplate{namespace: slessNamespace, template: d.Spec.Template})
			root.Spec.SecurityContext.RunAsNonRoot, root.Spec.SecurityContext.RunAsUser = nil, new(int64(0))
			for i := range root.Spec.Containers {
				root.Spec.Containers[i].SecurityContext.RunAsNonRoot = nil
			}
			if err := c.Create(ctx, root, client.DryRunAll); !isPodSecurity(err) {
				t.Errorf("a root pod in namespace %s: got %v; want it refused by PodSecurity", slessNamespace, err)
			}

			if r.find("Namespace", "", kanikoNamespace) == nil {
				return
			}
			if err := c.Create(ctx, kanikoPod(kanikoNamespace), client.DryRunAll); err != nil {
				t.Errorf("a kaniko build pod in namespace %s: %v", kanikoNamespace, err)
			}
			if err := c.Create(ctx, kanikoPod(slessNamespace), client.DryRunAll); !isPodSecurity(err) {
				t.Errorf("a kaniko build pod in namespace %s: got %v; want it refused by PodSecurity", slessNamespace, err)
			}
		})
	}
}

func isPodSecurity(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "PodSecurity")
}

// podOf is a pod of pt's template, with a volume for each claim template.
func podOf(pt podTemplate) *corev1.Pod {
	spec := *pt.template.Spec.DeepCopy()
	for _, claim := range pt.claims {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: claim, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim + "-0"}}})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "check-", Namespace: pt.namespace, Labels: pt.template.Labels},
		Spec:       spec,
	}
}

// kanikoPod is a pod of the Job the kaniko builder makes (with the
// server's default settings) in namespace ns.
func kanikoPod(ns string) *corev1.Pod {
	req := build.Request{Namespace: "team-a", Function: "hello", Runtime: "python3.11", Handler: "handler.handle",
		CodeSHA256: strings.Repeat("ab", 32)}
	job := kaniko.MakeBuildJob(kaniko.Config{Namespace: ns, Repository: "registry.example.com/sless/functions",
		Image: kanikosettings.DefaultImage, FetchImage: kanikosettings.DefaultFetchImage, Platform: "linux/amd64",
		Timeout: kanikosettings.DefaultTimeout},
		kaniko.BuildJob{Name: "build-hello", Request: req, Image: "registry.example.com/sless/functions:sless-1",
			ContextKey: "kaniko/team-a/hello/x.tar.gz", ContextURL: "http://minio.sless.svc:9000/sless/kaniko/team-a/hello/x.tar.gz",
			ContextBytes: 1 << 20})
	spec := job.Spec.Template.Spec
	// MakeBuildJob takes the resources from the builder's parsed settings.
	for i := range spec.Containers {
		spec.Containers[i].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(kanikosettings.DefaultCPU),
				corev1.ResourceMemory: resource.MustParse(kanikosettings.DefaultMemory)},
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(kanikosettings.DefaultMemory)},
		}
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "build-", Namespace: ns, Labels: job.Spec.Template.Labels}, Spec: spec}
}

// access is one request the server's service account makes, or must not
// be able to.
type access struct {
	verb, group, resource, subresource, namespace string
}

func (a access) String() string {
	r := a.resource
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	if a.group != "" {
		r += "." + a.group
	}
	if a.namespace != "" {
		return fmt.Sprintf("%s %s in %s", a.verb, r, a.namespace)
	}
	return a.verb + " " + r
}

// TestRBAC applies the RBAC of the install with every component for real
// and asks the API server's authorizer what the server's ServiceAccount
// may do: what the server does (docs/cluster-executor.md, docs/builds.md,
// custom-resources.md, leader election) and no more than that, such as
// reading Secrets or running pods of its own.
func TestRBAC(t *testing.T) {
	env := kubeenv.Start(t)
	c := env.Client
	ctx := t.Context()
	var every rendered
	for _, r := range renderAll(t) {
		if r.name == "production with every component" {
			every = r
		}
	}
	d, _ := slessPods(t, every)
	user := "system:serviceaccount:" + slessNamespace + ":" + d.Spec.Template.Spec.ServiceAccountName
	for _, o := range every.objs {
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if err := applyForReal(ctx, c, o); err != nil {
				t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
	tenant := names.Namespace("team-a")
	var allowed []access
	for _, res := range []string{"functions", "triggers", "functionjobs"} {
		for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete"} {
			allowed = append(allowed, access{verb, "sless.kube5s.ru", res, "", tenant})
		}
		for _, verb := range []string{"get", "update", "patch"} {
			allowed = append(allowed, access{verb, "sless.kube5s.ru", res, "status", tenant})
		}
		allowed = append(allowed, access{"update", "sless.kube5s.ru", res, "finalizers", tenant})
	}
	for _, verb := range []string{"get", "list", "create", "patch"} {
		allowed = append(allowed, access{verb, "", "namespaces", "", ""})
	}
	for _, gr := range [][2]string{{"apps", "deployments"}, {"", "services"}, {"networking.k8s.io", "networkpolicies"}, {"", "secrets"}} {
		for _, verb := range []string{"create", "patch", "delete"} {
			allowed = append(allowed, access{verb, gr[0], gr[1], "", tenant})
		}
	}
	// The Ingresses of http triggers, in the server's own namespace.
	for _, verb := range []string{"create", "patch", "delete"} {
		allowed = append(allowed, access{verb, "networking.k8s.io", "ingresses", "", slessNamespace})
	}
	allowed = append(allowed,
		access{"create", "", "events", "", tenant}, access{"patch", "", "events", "", tenant},
		access{"get", "coordination.k8s.io", "leases", "", slessNamespace},
		access{"create", "coordination.k8s.io", "leases", "", slessNamespace},
		access{"update", "coordination.k8s.io", "leases", "", slessNamespace},
		access{"create", "", "events", "", slessNamespace},
	)
	for _, verb := range []string{"get", "list", "create", "delete"} {
		allowed = append(allowed, access{verb, "batch", "jobs", "", kanikoNamespace})
	}
	allowed = append(allowed, access{"list", "", "pods", "", kanikoNamespace})

	denied := []access{
		{"get", "", "secrets", "", tenant}, {"list", "", "secrets", "", ""}, {"watch", "", "secrets", "", "kube-system"},
		// The server does not read what it applies.
		{"get", "apps", "deployments", "", tenant}, {"get", "", "services", "", tenant}, {"get", "", "events", "", tenant},
		{"get", "networking.k8s.io", "ingresses", "", slessNamespace}, {"list", "networking.k8s.io", "ingresses", "", ""},
		{"create", "", "pods", "", tenant}, {"create", "", "pods", "exec", kanikoNamespace}, {"create", "", "pods", "", kanikoNamespace},
		{"create", "batch", "jobs", "", tenant}, {"create", "batch", "jobs", "", slessNamespace},
		{"delete", "", "namespaces", "", ""},
		{"update", "coordination.k8s.io", "leases", "", "kube-system"},
		{"create", "rbac.authorization.k8s.io", "rolebindings", "", tenant},
		{"bind", "rbac.authorization.k8s.io", "clusterroles", "", ""},
		{"escalate", "rbac.authorization.k8s.io", "clusterroles", "", ""},
		{"update", "apiextensions.k8s.io", "customresourcedefinitions", "", ""},
		{"create", "", "serviceaccounts", "token", slessNamespace},
	}
	may := func(a access) bool {
		t.Helper()
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   user,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + slessNamespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: a.namespace, Verb: a.verb, Group: a.group,
				Resource: a.resource, Subresource: a.subresource},
		}}
		if err := c.Create(ctx, sar); err != nil {
			t.Fatalf("SubjectAccessReview of %s: %v", a, err)
		}
		return sar.Status.Allowed
	}
	check := func(a access, want bool) {
		t.Helper()
		if got := may(a); got != want {
			t.Errorf("%s may %s: %v; want %v", user, a, got, want)
		}
	}
	// The API server's authorizer sees the bindings just applied once its
	// informers have them.
	testenv.Eventually(t, 30*time.Second, "the bindings in effect", func() bool { return may(allowed[0]) })
	for _, a := range allowed {
		check(a, true)
	}
	for _, a := range denied {
		check(a, false)
	}
}
