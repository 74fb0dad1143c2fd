package crdriver

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"sless.kube5s.ru/sless/api/v1alpha1"
	"sless.kube5s.ru/sless/modules/reconciler"
)

// finalizing is an object's finalizer and deletion, in memory.
type finalizing struct {
	exists, deleting, has bool
	ensureErr, removeErr  error
	calls                 []string
}

func (f *finalizing) EnsureFinalizer(_ context.Context, _ string, name string) (bool, error) {
	f.calls = append(f.calls, "ensure")
	if f.ensureErr != nil {
		return false, f.ensureErr
	}
	if f.exists && !f.deleting {
		f.has = true
	}
	return f.exists && f.deleting, nil
}

func (f *finalizing) RemoveFinalizer(_ context.Context, _ string, name string) error {
	f.calls = append(f.calls, "remove")
	if f.removeErr != nil {
		return f.removeErr
	}
	f.has = false
	return nil
}

func TestWithFinalizer(t *testing.T) {
	errCleanup, errAPI := errors.New("cleanup failed"), errors.New("API server unreachable")
	for _, c := range []struct {
		name       string
		f          finalizing
		cleanupErr error
		wantCalls  []string
		wantErr    error
		wantHas    bool
		wantResult reconciler.Result
	}{
		{name: "an object gets the finalizer, then is reconciled", f: finalizing{exists: true},
			wantCalls: []string{"ensure", "reconcile"}, wantHas: true, wantResult: reconciler.Result{RequeueAfter: time.Second}},
		{name: "a gone object is reconciled (the core removes what it had)", f: finalizing{},
			wantCalls: []string{"ensure", "reconcile"}, wantResult: reconciler.Result{RequeueAfter: time.Second}},
		{name: "an object being deleted is cleaned up, then let go", f: finalizing{exists: true, deleting: true, has: true},
			wantCalls: []string{"ensure", "cleanup", "remove"}},
		{name: "a failed cleanup keeps the finalizer", f: finalizing{exists: true, deleting: true, has: true}, cleanupErr: errCleanup,
			wantCalls: []string{"ensure", "cleanup"}, wantErr: errCleanup, wantHas: true},
		{name: "a failed read reconciles nothing", f: finalizing{exists: true, ensureErr: errAPI},
			wantCalls: []string{"ensure"}, wantErr: errAPI},
		{name: "a failed removal is retried", f: finalizing{exists: true, deleting: true, has: true, removeErr: errAPI},
			wantCalls: []string{"ensure", "cleanup", "remove"}, wantErr: errAPI, wantHas: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := c.f
			fn := WithFinalizer[string](&f, "test/cleanup",
				func(context.Context, string) error { f.calls = append(f.calls, "cleanup"); return c.cleanupErr },
				func(context.Context, string) (reconciler.Result, error) {
					f.calls = append(f.calls, "reconcile")
					return reconciler.Result{RequeueAfter: time.Second}, nil
				})
			res, err := fn(t.Context(), "key")
			if !errors.Is(err, c.wantErr) || res != c.wantResult {
				t.Errorf("got %+v, %v; want %+v, %v", res, err, c.wantResult, c.wantErr)
			}
			if !slices.Equal(f.calls, c.wantCalls) || f.has != c.wantHas {
				t.Errorf("calls %v, finalizer %v; want %v, %v", f.calls, f.has, c.wantCalls, c.wantHas)
			}
		})
	}
}

func TestPredicates(t *testing.T) {
	fn := func(gen int64, deleting bool) *v1alpha1.Function {
		o := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "f", Generation: gen}}
		if deleting {
			o.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		return o
	}
	update := func(old, new *v1alpha1.Function) event.TypedUpdateEvent[*v1alpha1.Function] {
		return event.TypedUpdateEvent[*v1alpha1.Function]{ObjectOld: old, ObjectNew: new}
	}
	spec, existence := SpecChanged[*v1alpha1.Function](), ExistenceChanged[*v1alpha1.Function]()
	for _, c := range []struct {
		name                    string
		wantSpec, wantExistence bool
		create, delete, generic bool
		old, new                *v1alpha1.Function
	}{
		{name: "created", create: true, wantSpec: true, wantExistence: true},
		{name: "deleted", delete: true, wantSpec: true, wantExistence: true},
		{name: "its status written", old: fn(1, false), new: fn(1, false)},
		{name: "its spec changed", old: fn(1, false), new: fn(2, false), wantSpec: true},
		{name: "its deletion started", old: fn(1, false), new: fn(1, true), wantSpec: true},
		{name: "written while being deleted", old: fn(1, true), new: fn(1, true)},
		{name: "a generic event", generic: true},
	} {
		var gotSpec, gotExistence bool
		switch {
		case c.create:
			e := event.TypedCreateEvent[*v1alpha1.Function]{Object: fn(1, false)}
			gotSpec, gotExistence = spec.Create(e), existence.Create(e)
		case c.delete:
			e := event.TypedDeleteEvent[*v1alpha1.Function]{Object: fn(1, false)}
			gotSpec, gotExistence = spec.Delete(e), existence.Delete(e)
		case c.generic:
			e := event.TypedGenericEvent[*v1alpha1.Function]{Object: fn(1, false)}
			gotSpec, gotExistence = spec.Generic(e), existence.Generic(e)
		default:
			e := update(c.old, c.new)
			gotSpec, gotExistence = spec.Update(e), existence.Update(e)
		}
		if gotSpec != c.wantSpec || gotExistence != c.wantExistence {
			t.Errorf("%s: SpecChanged %v, ExistenceChanged %v; want %v, %v", c.name, gotSpec, gotExistence, c.wantSpec, c.wantExistence)
		}
	}
}
