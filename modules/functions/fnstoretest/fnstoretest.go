// Package fnstoretest is the conformance suite every functions.Store
// implementation runs from its tests (the SQL store now, a store of custom
// resources later), so that all of them honour the same contract.
package fnstoretest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"sless.kube5s.ru/sless/modules/functions"
)

func sample(ns, name string) *functions.Function {
	return &functions.Function{Namespace: ns, Name: name, Spec: functions.Spec{
		Runtime: "python3.11", Handler: "handler.handle", Env: map[string]string{"A": "1", "B": "two words"},
		TimeoutSeconds: 30, MemoryMB: 256, MinInstances: 1, MaxInstances: 10, Concurrency: 4, Egress: "all",
	}}
}

var ignoreTimes = cmpopts.IgnoreFields(functions.Function{}, "CreatedAt", "UpdatedAt")

// Run checks that the stores made by newStore implement functions.Store.
// newStore is called once per subtest and returns an empty store; it
// registers its own cleanup with t.Cleanup and may skip t when its backend
// is unavailable.
func Run(t *testing.T, newStore func(t *testing.T) functions.Store) {
	ctx := context.Background()

	t.Run("create get list delete", func(t *testing.T) {
		s := newStore(t)
		created, err := s.Create(ctx, sample("default", "hello"))
		if err != nil {
			t.Fatal(err)
		}
		want := sample("default", "hello")
		want.Generation = 1
		want.Status.Phase = functions.PhasePending
		if diff := cmp.Diff(want, created, ignoreTimes, cmpopts.IgnoreFields(functions.Status{}, "UpdatedAt")); diff != "" {
			t.Errorf("created (-want +got):\n%s", diff)
		}
		got, err := s.Get(ctx, functions.Key{Namespace: "default", Name: "hello"})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(created, got); diff != "" {
			t.Errorf("get (-created +got):\n%s", diff)
		}
		if _, err := s.Create(ctx, sample("default", "hello")); !errors.Is(err, functions.ErrAlreadyExists) {
			t.Errorf("second create: got %v, want ErrAlreadyExists", err)
		}
		// Same name in another namespace is a different function.
		if _, err := s.Create(ctx, sample("other", "hello")); err != nil {
			t.Errorf("create in another namespace: %v", err)
		}
		if err := s.Delete(ctx, got.Key()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, got.Key()); !errors.Is(err, functions.ErrNotFound) {
			t.Errorf("get after delete: got %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, got.Key()); !errors.Is(err, functions.ErrNotFound) {
			t.Errorf("second delete: got %v, want ErrNotFound", err)
		}
		if _, err := s.Get(ctx, functions.Key{Namespace: "other", Name: "hello"}); err != nil {
			t.Errorf("the other namespace's function is gone: %v", err)
		}
	})

	t.Run("list pages in name order", func(t *testing.T) {
		s := newStore(t)
		for i := 9; i >= 0; i-- {
			if _, err := s.Create(ctx, sample("ns", fmt.Sprintf("fn-%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Create(ctx, sample("zz", "not-listed")); err != nil {
			t.Fatal(err)
		}
		var names []string
		after := ""
		pages := 0
		for {
			items, more, err := s.List(ctx, "ns", functions.ListOptions{Limit: 4, After: after})
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, fn := range items {
				names = append(names, fn.Name)
			}
			if !more {
				break
			}
			after = items[len(items)-1].Name
		}
		want := []string{"fn-0", "fn-1", "fn-2", "fn-3", "fn-4", "fn-5", "fn-6", "fn-7", "fn-8", "fn-9"}
		if diff := cmp.Diff(want, names); diff != "" || pages != 3 {
			t.Errorf("pages %d (want 3), names (-want +got):\n%s", pages, diff)
		}
		keys, err := s.Keys(ctx)
		if err != nil || len(keys) != 11 {
			t.Errorf("Keys: got %d keys, %v; want 11", len(keys), err)
		}
	})

	// The status comes back whole, bookkeeping and conditions included, and
	// spec and code writes leave it alone. Condition times are whole
	// seconds: a Kubernetes condition (metav1.Condition) keeps no more.
	t.Run("spec, code and status writes are independent", func(t *testing.T) {
		s := newStore(t)
		fn, err := s.Create(ctx, sample("default", "f"))
		if err != nil {
			t.Fatal(err)
		}
		key := fn.Key()
		st := functions.Status{Phase: functions.PhaseReady, Message: "m", CodeSHA256: "abc", BuildLog: "log",
			ObservedGeneration: 1, Artifact: "/a", ArtifactRuntime: "python3.11", ArtifactHandler: "main.run", BuildKey: "k",
			Conditions: []functions.Condition{
				{Type: functions.ConditionBuildSucceeded, Status: functions.ConditionTrue, Reason: functions.ReasonBuilt,
					ObservedGeneration: 1, LastTransitionTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
				{Type: functions.ConditionReady, Status: functions.ConditionFalse, Reason: functions.ReasonDeploying, Message: "m",
					ObservedGeneration: 1, LastTransitionTime: time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC)},
			}}
		if err := s.UpdateStatus(ctx, key, st); err != nil {
			t.Fatal(err)
		}
		spec := fn.Spec
		spec.Env = nil
		spec.Concurrency = 9
		spec.Egress = "public"
		updated, err := s.UpdateSpec(ctx, key, spec)
		if err != nil {
			t.Fatal(err)
		}
		if updated.Generation != 2 || updated.Concurrency != 9 || updated.Env != nil || updated.Egress != "public" {
			t.Errorf("after UpdateSpec: generation %d concurrency %d env %v egress %q; want 2, 9, nil, public",
				updated.Generation, updated.Concurrency, updated.Env, updated.Egress)
		}
		withCode, err := s.SetCode(ctx, key, "c0de")
		if err != nil {
			t.Fatal(err)
		}
		if withCode.Generation != 3 || withCode.CodeSHA256 != "c0de" || withCode.Concurrency != 9 {
			t.Errorf("after SetCode: %+v", withCode)
		}
		if diff := cmp.Diff(st, withCode.Status, cmpopts.IgnoreFields(functions.Status{}, "UpdatedAt")); diff != "" {
			t.Errorf("status changed by spec/code writes (-want +got):\n%s", diff)
		}
		missing := functions.Key{Namespace: "default", Name: "missing"}
		if _, err := s.UpdateSpec(ctx, missing, spec); !errors.Is(err, functions.ErrNotFound) {
			t.Errorf("UpdateSpec of a missing function: %v", err)
		}
		if _, err := s.SetCode(ctx, missing, "x"); !errors.Is(err, functions.ErrNotFound) {
			t.Errorf("SetCode of a missing function: %v", err)
		}
		if err := s.UpdateStatus(ctx, missing, st); !errors.Is(err, functions.ErrNotFound) {
			t.Errorf("UpdateStatus of a missing function: %v", err)
		}
	})

	t.Run("concurrent updates each count", func(t *testing.T) {
		s := newStore(t)
		fn, err := s.Create(ctx, sample("default", "busy"))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for i := range 20 {
			wg.Go(func() {
				_, err := s.SetCode(ctx, fn.Key(), fmt.Sprint(i))
				errs <- err
			})
			wg.Go(func() {
				errs <- s.UpdateStatus(ctx, fn.Key(), functions.Status{Phase: functions.PhaseBuilding, ObservedGeneration: int64(i)})
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Get(ctx, fn.Key())
		if err != nil {
			t.Fatal(err)
		}
		if got.Generation != 21 {
			t.Errorf("generation after 20 concurrent SetCode: got %d, want 21", got.Generation)
		}
	})
}
