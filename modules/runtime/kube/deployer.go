package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.kube5s.ru/sless/internal/names"
	"sless.kube5s.ru/sless/modules/meta"
	"sless.kube5s.ru/sless/modules/runtime"
)

// Deployer is the cluster mode's runtime.Deployer. It is safe for
// concurrent use.
type Deployer struct {
	c    client.Client
	opts Options
}

var _ runtime.Deployer = (*Deployer)(nil)

// New returns a Deployer that manages function objects through c, whose
// scheme must know the core, apps and networking types (client-go's
// scheme does). It fails on an invalid setting of opts.
//
// What it must be allowed to do: create, patch and delete Deployments,
// Services, NetworkPolicies and Secrets in the tenant namespaces, and create
// and patch Namespaces.
func New(c client.Client, opts Options) (*Deployer, error) {
	opts = opts.defaults()
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("kubernetes executor: %w", err)
	}
	return &Deployer{c: c, opts: opts}, nil
}

// Deploy implements runtime.Deployer: it applies the namespace of t's
// function (and its pull secret), then t's env Secret, Service,
// NetworkPolicy and Deployment, and reports the Deployment's rollout as the
// API server answered the apply. Applying what is already there changes
// nothing, so a Deploy of the same target is cheap and rolls nothing; a
// suspended target is scaled to zero in place. A target whose artifact is
// not a digest-pinned image reference fails with runtime.ErrUnsupported
// before anything is applied.
func (d *Deployer) Deploy(ctx context.Context, t runtime.Target) (runtime.Rollout, error) {
	if _, err := name.NewDigest(t.Artifact); err != nil {
		return runtime.Rollout{}, runtime.Errorf(runtime.ErrUnsupported,
			"its build is not a container image, which this server runs functions from", err)
	}
	objs := []client.Object{MakeNamespace(t.Namespace)}
	if s := MakePullSecret(t.Namespace, d.opts); s != nil {
		objs = append(objs, s)
	}
	dep := MakeDeployment(&t, d.opts)
	// The Deployment last: its pods need the rest.
	objs = append(objs, MakeEnvSecret(&t), MakeService(&t), MakeNetworkPolicy(&t, d.opts), dep)
	for _, obj := range objs {
		if err := d.apply(ctx, obj); err != nil {
			return runtime.Rollout{}, err
		}
	}
	return rolloutOf(dep), nil
}

// apply server-side applies obj, taking over the fields it sets from any
// other manager (a `kubectl scale` is undone), and reads the result into
// obj.
func (d *Deployer) apply(ctx context.Context, obj client.Object) error {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if err := d.c.Patch(ctx, obj, client.Apply, client.FieldOwner(names.FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", kind, objectName(obj), err)
	}
	return nil
}

// Undeploy implements runtime.Deployer: it deletes the Deployment (its
// pods stop gracefully), the Service, the NetworkPolicy and the env Secret
// of the function, whichever exist. The namespace and its pull secret stay:
// other functions may use them.
func (d *Deployer) Undeploy(ctx context.Context, key meta.Key) error {
	ns := names.Namespace(key.Namespace)
	om := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: ns} }
	var errs []error
	for _, o := range []struct {
		kind string
		obj  client.Object
	}{
		{"Deployment", &appsv1.Deployment{ObjectMeta: om(names.Deployment(key.Name))}},
		{"Service", &corev1.Service{ObjectMeta: om(names.Service(key.Name))}},
		{"NetworkPolicy", &networkingv1.NetworkPolicy{ObjectMeta: om(names.NetworkPolicy(key.Name))}},
		{"Secret", &corev1.Secret{ObjectMeta: om(names.EnvSecret(key.Name))}},
	} {
		err := d.c.Delete(ctx, o.obj, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting %s %s: %w", o.kind, objectName(o.obj), err))
		}
	}
	return errors.Join(errs...)
}

// objectName is "namespace/name" of obj, or its name when it has no
// namespace.
func objectName(obj client.Object) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}

// Instances is the cluster mode's runtime.Instances until invocations are
// routed to the function pods: it refuses every invocation and prewarm with
// runtime.ErrUnavailable, which /fn answers with a 503 saying so.
type Instances struct{}

var _ runtime.Instances = Instances{}

// errNoDataPlane is what Instances refuses with.
var errNoDataPlane = runtime.Errorf(runtime.ErrUnavailable, "invocations are not available in this mode yet", nil)

// Acquire implements runtime.Instances.
func (Instances) Acquire(context.Context, meta.Key) (runtime.Lease, error) {
	return nil, errNoDataPlane
}

// Warm implements runtime.Instances.
func (Instances) Warm(context.Context, meta.Key, time.Time) error { return errNoDataPlane }
