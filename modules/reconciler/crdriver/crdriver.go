// Package crdriver is the cluster mode's driver of the reconcile core: it
// runs a reconciler.Func from controller-runtime, as internal/controller
// runs it from a work queue in the embedded mode. One generic Driver does it
// for every kind: the work queue holds the core's own keys (a typed
// controller), watches of the custom resource and of what changes its
// desired state (the children it owns, the objects it depends on) map
// objects to keys, and the core's Result maps to controller-runtime's.
//
// Drivers are members of the fx value group ControllersGroup; Run sets every
// member up on one manager and runs it for the server's lifetime. A driver
// runs in the elected leader only, unless it says it runs everywhere.
//
// Only the cluster build links this package: it imports controller-runtime.
package crdriver

import (
	"context"

	"go.uber.org/fx"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"sless.kube5s.ru/sless/modules/reconciler"
)

// ControllersGroup is the fx value group of the controllers a manager runs
// (each a Controller).
const ControllersGroup = `group:"controllers"`

// Controller is something a manager runs: a Driver.
type Controller interface {
	// SetupWithManager registers the controller and its watches with mgr,
	// before mgr starts.
	SetupWithManager(mgr manager.Manager) error
}

// AsController annotates ctor, a constructor of a Controller, as a member
// of ControllersGroup.
func AsController(ctor any) any {
	return fx.Annotate(ctor, fx.As(new(Controller)), fx.ResultTags(ControllersGroup))
}

// Watch makes the source of the keys one watch enqueues, from the
// manager's cache.
type Watch[K comparable] func(c cache.Cache) source.TypedSource[K]

// WatchObjects watches objects like obj and enqueues the keys that keys
// maps an object to (none to ignore it), for the events that pass preds
// (every event when there are none). For an update it enqueues the keys of
// the old object and of the new. keys must be quick and must not fail: an
// object it cannot map is logged and dropped there.
func WatchObjects[O client.Object, K comparable](obj O, keys func(ctx context.Context, obj O) []K,
	preds ...predicate.TypedPredicate[O]) Watch[K] {
	return func(c cache.Cache) source.TypedSource[K] {
		return source.TypedKind(c, obj, handler.TypedEnqueueRequestsFromMapFunc(keys), preds...)
	}
}

// ExistenceChanged passes the creation and the deletion of an object and
// nothing else: what watches of objects whose existence matters, not their
// content, need.
func ExistenceChanged[O client.Object]() predicate.TypedPredicate[O] {
	return predicate.TypedFuncs[O]{
		UpdateFunc:  func(event.TypedUpdateEvent[O]) bool { return false },
		GenericFunc: func(event.TypedGenericEvent[O]) bool { return false },
	}
}

// SpecChanged passes creations, deletions, and updates that change an
// object's generation (its spec) or start its deletion, and not the
// updates of its status alone, which the reconciler itself writes.
func SpecChanged[O client.Object]() predicate.TypedPredicate[O] {
	return predicate.TypedFuncs[O]{
		GenericFunc: func(event.TypedGenericEvent[O]) bool { return false },
		UpdateFunc: func(e event.TypedUpdateEvent[O]) bool {
			return e.ObjectNew.GetGeneration() != e.ObjectOld.GetGeneration() ||
				(e.ObjectNew.GetDeletionTimestamp() != nil && e.ObjectOld.GetDeletionTimestamp() == nil)
		},
	}
}

// Options configure a Driver.
type Options[K comparable] struct {
	// Name names the controller in logs and metrics; unique per manager.
	Name string
	// Reconcile is the core's reconcile function.
	Reconcile reconciler.Func[K]
	// Watches enqueue the keys to reconcile. Every key a watch has seen is
	// also reconciled once after start (the informers list every object
	// first), so work interrupted by a crash or a new leader resumes.
	Watches []Watch[K]
	// Workers is how many keys are reconciled at once; default 1. One key
	// is never reconciled by two workers at once.
	Workers int
	// Everywhere runs the controller in every replica, not only in the
	// elected leader; such a controller must not write what the leader
	// writes.
	Everywhere bool
}

// Driver runs one reconciler.Func from controller-runtime. It is a
// Controller.
type Driver[K comparable] struct {
	opts   Options[K]
	events chan event.TypedGenericEvent[K]
}

// eventBuffer is how many keys Enqueue holds before the controller takes
// them; more are dropped (see Enqueue).
const eventBuffer = 1024

// New returns a driver of opts.Reconcile; it runs once a manager it was set
// up with starts (and, unless opts.Everywhere, is elected).
func New[K comparable](opts Options[K]) *Driver[K] {
	return &Driver[K]{opts: opts, events: make(chan event.TypedGenericEvent[K], eventBuffer)}
}

// Enqueue asks for key to be reconciled, for what no watch sees (a build
// that ended, a job run that finished). It never blocks: before the
// controller runs, or when it is behind by eventBuffer keys, the key is
// dropped, and the core's own requeue (its Result) or the next watch event
// reconciles it instead.
func (d *Driver[K]) Enqueue(key K) {
	select {
	case d.events <- event.TypedGenericEvent[K]{Object: key}:
	default:
	}
}

// SetupWithManager implements Controller.
func (d *Driver[K]) SetupWithManager(mgr manager.Manager) error {
	c, err := controller.NewTyped(d.opts.Name, mgr, controller.TypedOptions[K]{
		Reconciler:              reconcile.TypedFunc[K](d.reconcile),
		MaxConcurrentReconciles: max(d.opts.Workers, 1),
		NeedLeaderElection:      ptr.To(!d.opts.Everywhere),
		// Names are unique per manager; several managers of one process
		// (the tests') may use the same.
		SkipNameValidation: ptr.To(true),
	})
	if err != nil {
		return err
	}
	for _, w := range d.opts.Watches {
		if err := c.Watch(w(mgr.GetCache())); err != nil {
			return err
		}
	}
	enqueue := handler.TypedFuncs[K, K]{
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[K], q workqueue.TypedRateLimitingInterface[K]) {
			q.Add(e.Object)
		},
	}
	return c.Watch(source.TypedChannel[K, K](d.events, enqueue))
}

// reconcile runs the core's function for key. Its errors are retried with
// backoff and logged by controller-runtime.
func (d *Driver[K]) reconcile(ctx context.Context, key K) (reconcile.Result, error) {
	res, err := d.opts.Reconcile(ctx, key)
	return reconcile.Result{RequeueAfter: res.RequeueAfter}, err
}

// Finalizing keeps a finalizer on the objects of one kind, so that a
// deleted object stays until its cleanup is done.
type Finalizing[K comparable] interface {
	// EnsureFinalizer adds finalizer name to key's object unless it is
	// being deleted, and reports whether it is. An object that does not
	// exist is not being deleted (nil error): it is gone.
	EnsureFinalizer(ctx context.Context, key K, name string) (deleting bool, err error)
	// RemoveFinalizer removes finalizer name from key's object, which the
	// API server then deletes; a missing object is not an error.
	RemoveFinalizer(ctx context.Context, key K, name string) error
}

// WithFinalizer returns next with a finalizer: an object that exists gets
// finalizer name before next reconciles it, and one being deleted is
// cleaned up by cleanup (which must be idempotent; the core's removal of
// a gone object) before its finalizer is removed, instead of being
// reconciled. So nothing of an object outlives it, even when it is deleted
// while no leader runs.
func WithFinalizer[K comparable](f Finalizing[K], name string, cleanup func(context.Context, K) error,
	next reconciler.Func[K]) reconciler.Func[K] {
	return func(ctx context.Context, key K) (reconciler.Result, error) {
		deleting, err := f.EnsureFinalizer(ctx, key, name)
		if err != nil {
			return reconciler.Result{}, err
		}
		if !deleting {
			return next(ctx, key)
		}
		if err := cleanup(ctx, key); err != nil {
			return reconciler.Result{}, err
		}
		return reconciler.Result{}, f.RemoveFinalizer(ctx, key, name)
	}
}
