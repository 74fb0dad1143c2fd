// Package fncontroller is the cluster mode's driver of the function
// reconciler: the same core as the embedded mode's
// (modules/functions/reconcile), run by controller-runtime in the elected
// leader (modules/reconciler/crdriver) over Function custom resources
// (modules/functions/crstore).
//
// A function is reconciled when its Function changes, when a Deployment of
// its changes (the rollout the core waits for), when one of its triggers
// comes, goes or changes its spec (whether it is suspended), and when its
// build ends. Its Function keeps the finalizer Finalizer until the core
// removed what the function had (its build and its Deployment, Service,
// NetworkPolicy and env Secret), so nothing outlives a function deleted
// while no leader ran. Each transition of a function's status is also an
// Event of its Function, which `kubectl describe` shows.
//
// Only the cluster build links this package.
package fncontroller

import (
	"context"
	"log/slog"
	"strings"

	"go.uber.org/fx"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"sless.kube5s.ru/sless/api/v1alpha1"
	"sless.kube5s.ru/sless/internal/names"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/functions/crstore"
	"sless.kube5s.ru/sless/modules/functions/fnmetrics"
	"sless.kube5s.ru/sless/modules/functions/reconcile"
	"sless.kube5s.ru/sless/modules/reconciler/crdriver"
	"sless.kube5s.ru/sless/modules/runtime"
)

// Finalizer holds a deleted Function until its cleanup is done.
const Finalizer = "sless.kube5s.ru/cleanup"

// Workers is how many functions are reconciled at once; no reconcile
// waits for a build or a rollout.
const Workers = 4

// Module provides the function controller as a member of
// crdriver.ControllersGroup, and the functions.ChangeNotifier of the
// cluster mode, which does nothing: the controller watches the Functions
// that the API writes. It needs the *crstore.Store of functions.
var Module = fx.Module("functions-controller",
	fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "functions") }),
	fx.Provide(
		crdriver.AsController(New),
		func() functions.ChangeNotifier { return functions.NotifierFunc(func(functions.Key) {}) },
	),
)

// Params are what the controller needs.
type Params struct {
	fx.In
	Store      *crstore.Store
	Builder    build.Builder
	Deployer   runtime.Deployer
	Suspension functions.Suspension
	Phases     *fnmetrics.Phases
	// Manager records the Events.
	Manager manager.Manager
	Log     *slog.Logger
}

// New returns the function controller.
func New(p Params) *crdriver.Driver[functions.Key] {
	var d *crdriver.Driver[functions.Key]
	// A build that ended enqueues its function, which reads the result.
	store := eventing{Store: p.Store, recorder: p.Manager.GetEventRecorderFor("sless")}
	rec := reconcile.New(store, p.Builder, p.Deployer, p.Suspension, func(k functions.Key) { d.Enqueue(k) }, p.Log)
	rec.ObservePhases(p.Phases)
	// keyOf is the key of function name in Kubernetes namespace k8sNS.
	keyOf := func(ctx context.Context, k8sNS, name string) []functions.Key {
		k, ok, err := p.Store.KeyOf(ctx, k8sNS, name)
		if err != nil {
			p.Log.ErrorContext(ctx, "mapping an object to its function failed; it is reconciled at the next resync",
				"namespace", k8sNS, "function", name, "error", err)
		}
		if !ok {
			return nil
		}
		return []functions.Key{k}
	}
	d = crdriver.New(crdriver.Options[functions.Key]{
		Name:      "functions",
		Reconcile: crdriver.WithFinalizer(p.Store, Finalizer, rec.Remove, rec.Reconcile),
		Workers:   Workers,
		Watches: []crdriver.Watch[functions.Key]{
			// Not the writes of its status, which are the core's own.
			crdriver.WatchObjects(&v1alpha1.Function{}, func(ctx context.Context, fn *v1alpha1.Function) []functions.Key {
				return keyOf(ctx, fn.Namespace, fn.Name)
			}, crdriver.SpecChanged[*v1alpha1.Function]()),
			crdriver.WatchObjects(&appsv1.Deployment{}, DeploymentKeys),
			crdriver.WatchObjects(&v1alpha1.Trigger{}, func(ctx context.Context, t *v1alpha1.Trigger) []functions.Key {
				return keyOf(ctx, t.Namespace, t.Spec.Function)
			}, crdriver.SpecChanged[*v1alpha1.Trigger]()),
		},
	})
	return d
}

// DeploymentKeys maps a function's Deployment to the function, by the
// labels the executor gives it (names.NamespaceLabel and
// names.FunctionLabel); other Deployments map to nothing.
func DeploymentKeys(_ context.Context, d *appsv1.Deployment) []functions.Key {
	ns, fn := d.Labels[names.NamespaceLabel], d.Labels[names.FunctionLabel]
	if ns == "" || fn == "" {
		return nil
	}
	return []functions.Key{{Namespace: ns, Name: fn}}
}

// eventing is the core's store of functions, which also records a
// Kubernetes Event on a Function at each transition of its status (its
// phase, or the reason of its Ready condition), for `kubectl describe`:
// a Warning when it failed, else Normal, with the reason of Ready and the
// status' message. A status is written only when it changed, so the read
// of the old one that this costs is rare.
type eventing struct {
	*crstore.Store
	recorder record.EventRecorder
}

// UpdateStatus implements functions.Store.
func (s eventing) UpdateStatus(ctx context.Context, key functions.Key, st functions.Status) error {
	cr, err := s.Store.GetCR(ctx, key)
	if err != nil {
		return err
	}
	if err := s.Store.UpdateStatus(ctx, key, st); err != nil {
		return err
	}
	reason := string(st.Phase)
	if c := st.Condition(functions.ConditionReady); c != nil {
		reason = c.Reason
	}
	oldReason := cr.Status.Phase
	if c := apimeta.FindStatusCondition(cr.Status.Conditions, functions.ConditionReady); c != nil {
		oldReason = c.Reason
	}
	if string(st.Phase) == cr.Status.Phase && reason == oldReason {
		return nil
	}
	typ, msg := corev1.EventTypeNormal, st.Message
	if st.Phase == functions.PhaseFailed {
		typ = corev1.EventTypeWarning
	}
	if msg == "" {
		msg = "the function is " + strings.ToLower(string(st.Phase))
	}
	s.recorder.Event(cr, typ, reason, msg)
	return nil
}
