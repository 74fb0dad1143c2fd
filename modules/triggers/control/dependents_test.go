package control

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/reconcile"
	"sless.kube5s.ru/sless/modules/triggers/trstoretest"
)

// TestDeleteDependents deletes a function's triggers and jobs, and only
// its, and stops the triggers before it returns.
func TestDeleteDependents(t *testing.T) {
	ctx := context.Background()
	trs, jobs := trstoretest.NewTriggers(), trstoretest.NewJobs()
	fn := functions.Key{Namespace: "ns", Name: "f"}
	for _, tr := range []*triggers.Trigger{trigger("web", triggers.TypeHTTP), trigger("nightly", triggers.TypeCron),
		trigger("kept", triggers.TypeHTTP, func(t *triggers.Trigger) { t.Function = "g" })} {
		if _, err := trs.Create(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	for _, j := range []*triggers.Job{{Namespace: "ns", Name: "once", JobSpec: triggers.JobSpec{Function: "f"}},
		{Namespace: "other", Name: "once", JobSpec: triggers.JobSpec{Function: "f"}}} {
		if _, err := jobs.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var calls []string
	runners := map[string]triggers.Runner{triggers.TypeCron: fakeRunner{typ: triggers.TypeCron, mu: &mu, calls: &calls}}
	gate := NewGate()
	gate.set(triggers.Key{Namespace: "ns", Name: "web"}, reconcile.Exposure{Function: fn})
	var notified []functions.Key
	local := NewLocal(trs, runners, gate, NewStatusKeeper(trs, discard), functions.NotifierFunc(func(k functions.Key) {
		notified = append(notified, k)
	}), discard)
	var enqueued []string
	enqueue := func(kind string) func(triggers.Key) {
		return func(k triggers.Key) { enqueued = append(enqueued, kind+" "+k.String()) }
	}
	d := NewDependents(trs, jobs, local.Remove, enqueue("trigger"), enqueue("job"))

	deleted, err := d.DeleteDependents(ctx, fn)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{KindTriggers: {"nightly", "web"}, KindJobs: {"once"}}, deleted); diff != "" {
		t.Errorf("deleted (-want +got):\n%s", diff)
	}
	for _, k := range []triggers.Key{{Namespace: "ns", Name: "web"}, {Namespace: "ns", Name: "nightly"}} {
		if _, err := trs.Get(ctx, k); !errors.Is(err, triggers.ErrNotFound) {
			t.Errorf("trigger %s: %v; want it deleted", k, err)
		}
	}
	if _, err := trs.Get(ctx, triggers.Key{Namespace: "ns", Name: "kept"}); err != nil {
		t.Errorf("another function's trigger: %v; want it kept", err)
	}
	if _, err := jobs.Get(ctx, triggers.Key{Namespace: "other", Name: "once"}); err != nil {
		t.Errorf("a job of another namespace: %v; want it kept", err)
	}
	if got := gate.Access(fn.Namespace, fn.Name); got != (invoke.Access{}) {
		t.Errorf("/fn access %+v after the delete; want none", got)
	}
	slices.Sort(calls)
	if diff := cmp.Diff([]string{"remove cron ns/nightly", "remove cron ns/web"}, calls); diff != "" {
		t.Errorf("runner calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]functions.Key{fn}, notified); diff != "" {
		t.Errorf("exposure changes (-want +got):\n%s", diff)
	}
	slices.Sort(enqueued)
	if diff := cmp.Diff([]string{"job ns/once", "trigger ns/nightly", "trigger ns/web"}, enqueued); diff != "" {
		t.Errorf("enqueued (-want +got):\n%s", diff)
	}
	// Once more, with nothing left: every kind present, empty.
	deleted, err = d.DeleteDependents(ctx, fn)
	if diff := cmp.Diff(map[string][]string{KindTriggers: {}, KindJobs: {}}, deleted); err != nil || diff != "" {
		t.Errorf("second delete: %v (-want +got):\n%s", err, diff)
	}
}
