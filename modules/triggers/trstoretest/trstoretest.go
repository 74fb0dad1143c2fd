// Package trstoretest is the conformance suite that every triggers.Store
// and triggers.JobStore implementation runs from its tests (the gorm store
// on SQLite and PostgreSQL, the in-memory stores of this package, and later
// a store of Kubernetes custom resources), so that all of them honour the
// same contract.
package trstoretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"sless.kube5s.ru/sless/modules/triggers"
)

// RunTriggers checks that the stores made by newStore implement
// triggers.Store. newStore is called once per subtest, from parallel
// subtests, and returns an empty store; it registers its own cleanup with
// t.Cleanup and may skip t when its backend is unavailable.
func RunTriggers(t *testing.T, newStore func(t *testing.T) triggers.Store) {
	run(t, func(t *testing.T) kind[triggers.Spec, triggers.Status] { return triggerKind(newStore(t)) })
	t.Run("All", func(t *testing.T) {
		t.Parallel()
		testAll(t, newStore(t))
	})
}

// RunJobs checks that the stores made by newStore implement
// triggers.JobStore, with newStore as RunTriggers has it.
func RunJobs(t *testing.T, newStore func(t *testing.T) triggers.JobStore) {
	run(t, func(t *testing.T) kind[triggers.JobSpec, triggers.JobStatus] { return jobKind(newStore(t)) })
}

// object is what the suite compares of a trigger or a job.
type object[Spec, Status any] struct {
	Key        triggers.Key
	Spec       Spec
	Status     Status
	Generation int64
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// kind adapts a Store or a JobStore to the generic checks, which are the
// same for both, and makes their sample specs and statuses.
type kind[Spec, Status any] struct {
	create       func(ctx context.Context, key triggers.Key, spec Spec) (*object[Spec, Status], error)
	get          func(ctx context.Context, key triggers.Key) (*object[Spec, Status], error)
	list         func(ctx context.Context, ns string, opts triggers.ListOptions) ([]*object[Spec, Status], bool, error)
	byFunction   func(ctx context.Context, ns, function string) ([]*object[Spec, Status], error)
	keys         func(ctx context.Context) ([]triggers.Key, error)
	updateSpec   func(ctx context.Context, key triggers.Key, spec Spec) (*object[Spec, Status], error)
	updateStatus func(ctx context.Context, key triggers.Key, status Status) error
	delete       func(ctx context.Context, key triggers.Key) error
	// spec returns a spec of function whose other fields depend on i;
	// status returns a status with every field set, depending on i.
	spec   func(function string, i int) Spec
	status func(i int) Status
}

func triggerKind(s triggers.Store) kind[triggers.Spec, triggers.Status] {
	one, all := lift(func(t *triggers.Trigger) *object[triggers.Spec, triggers.Status] {
		return &object[triggers.Spec, triggers.Status]{Key: t.Key(), Spec: t.Spec, Status: t.Status,
			Generation: t.Generation, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt}
	})
	return kind[triggers.Spec, triggers.Status]{
		create: func(ctx context.Context, k triggers.Key, spec triggers.Spec) (*object[triggers.Spec, triggers.Status], error) {
			return one(s.Create(ctx, &triggers.Trigger{Namespace: k.Namespace, Name: k.Name, Spec: spec}))
		},
		get: func(ctx context.Context, k triggers.Key) (*object[triggers.Spec, triggers.Status], error) {
			return one(s.Get(ctx, k))
		},
		list: func(ctx context.Context, ns string, opts triggers.ListOptions) ([]*object[triggers.Spec, triggers.Status], bool, error) {
			items, more, err := s.List(ctx, ns, opts)
			out, err := all(items, err)
			return out, more, err
		},
		byFunction: func(ctx context.Context, ns, fn string) ([]*object[triggers.Spec, triggers.Status], error) {
			return all(s.ByFunction(ctx, ns, fn))
		},
		keys: s.Keys,
		updateSpec: func(ctx context.Context, k triggers.Key, spec triggers.Spec) (*object[triggers.Spec, triggers.Status], error) {
			return one(s.UpdateSpec(ctx, k, spec))
		},
		updateStatus: s.UpdateStatus,
		delete:       s.Delete,
		spec:         sampleTrigger,
		status: func(i int) triggers.Status {
			at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC).Add(time.Duration(i) * time.Second)
			return triggers.Status{Phase: triggers.PhaseError, Message: fmt.Sprint("message ", i), LastFiredAt: &at,
				LastError: "boom", LastErrorAt: &at, NextFireAt: &at, Fired: int64(i) + 1, Succeeded: 2, Failed: 3,
				Skipped: 4, DeadLettered: 5, ObservedGeneration: int64(i)}
		},
	}
}

func jobKind(s triggers.JobStore) kind[triggers.JobSpec, triggers.JobStatus] {
	one, all := lift(func(j *triggers.Job) *object[triggers.JobSpec, triggers.JobStatus] {
		return &object[triggers.JobSpec, triggers.JobStatus]{Key: j.Key(), Spec: j.JobSpec, Status: j.Status,
			Generation: j.Generation, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt}
	})
	return kind[triggers.JobSpec, triggers.JobStatus]{
		create: func(ctx context.Context, k triggers.Key, spec triggers.JobSpec) (*object[triggers.JobSpec, triggers.JobStatus], error) {
			return one(s.Create(ctx, &triggers.Job{Namespace: k.Namespace, Name: k.Name, JobSpec: spec}))
		},
		get: func(ctx context.Context, k triggers.Key) (*object[triggers.JobSpec, triggers.JobStatus], error) {
			return one(s.Get(ctx, k))
		},
		list: func(ctx context.Context, ns string, opts triggers.ListOptions) ([]*object[triggers.JobSpec, triggers.JobStatus], bool, error) {
			items, more, err := s.List(ctx, ns, opts)
			out, err := all(items, err)
			return out, more, err
		},
		byFunction: func(ctx context.Context, ns, fn string) ([]*object[triggers.JobSpec, triggers.JobStatus], error) {
			return all(s.ByFunction(ctx, ns, fn))
		},
		keys: s.Keys,
		updateSpec: func(ctx context.Context, k triggers.Key, spec triggers.JobSpec) (*object[triggers.JobSpec, triggers.JobStatus], error) {
			return one(s.UpdateSpec(ctx, k, spec))
		},
		updateStatus: s.UpdateStatus,
		delete:       s.Delete,
		spec: func(function string, i int) triggers.JobSpec {
			return triggers.JobSpec{Function: function, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), RunID: int64(i)}
		},
		status: func(i int) triggers.JobStatus {
			at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC).Add(time.Duration(i) * time.Second)
			return triggers.JobStatus{Phase: triggers.JobFailed, RunID: int64(i), InvocationID: fmt.Sprint("inv-", i),
				StartedAt: &at, FinishedAt: &at, StatusCode: 500, Result: `{"ok":false}`, Error: "boom", ObservedGeneration: int64(i)}
		},
	}
}

// sampleTrigger returns a trigger spec with every field set: the fields of
// every type, since a store keeps the spec whole whatever its type.
func sampleTrigger(function string, i int) triggers.Spec {
	on, retries := i%2 == 0, i
	return triggers.Spec{Function: function, Type: triggers.TypeRabbitMQ, Enabled: &on,
		HTTPSpec: triggers.HTTPSpec{Auth: triggers.AuthToken},
		CronSpec: triggers.CronSpec{Schedule: "@every 1m", Timezone: "Europe/Moscow", Payload: json.RawMessage(`{"a":[1,2]}`),
			ConcurrencyPolicy: triggers.PolicyForbid, PrewarmSeconds: 5},
		RabbitMQSpec: triggers.RabbitMQSpec{URL: "amqp://u:p@host/vh", Queue: fmt.Sprint("q-", i), Exchange: "x", RoutingKey: "r",
			Prefetch: 7, MaxRetries: &retries, DeadLetterExchange: "dlx"},
	}
}

// lift returns conv applied to a store's answer of one object and of
// several.
func lift[T, O any](conv func(*T) *O) (func(*T, error) (*O, error), func([]*T, error) ([]*O, error)) {
	one := func(v *T, err error) (*O, error) {
		if err != nil {
			return nil, err
		}
		return conv(v), nil
	}
	all := func(vs []*T, err error) ([]*O, error) {
		if err != nil {
			return nil, err
		}
		out := make([]*O, len(vs))
		for i, v := range vs {
			out[i] = conv(v)
		}
		return out, nil
	}
	return one, all
}

func run[Spec, Status any](t *testing.T, newKind func(t *testing.T) kind[Spec, Status]) {
	tests := []struct {
		name string
		fn   func(t *testing.T, k kind[Spec, Status])
	}{
		{"CreateGet", testCreateGet[Spec, Status]},
		{"CreateExisting", testCreateExisting[Spec, Status]},
		{"Missing", testMissing[Spec, Status]},
		{"Delete", testDelete[Spec, Status]},
		{"ListPages", testListPages[Spec, Status]},
		{"ByFunction", testByFunction[Spec, Status]},
		{"Keys", testKeys[Spec, Status]},
		{"SpecAndStatusIndependent", testIndependent[Spec, Status]},
		{"ReturnedObjectsAreCopies", testCopies[Spec, Status]},
		{"Concurrent", testConcurrent[Spec, Status]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newKind(t))
		})
	}
}

var ctx = context.Background()

func key(ns, name string) triggers.Key { return triggers.Key{Namespace: ns, Name: name} }

func mustCreate[Spec, Status any](t *testing.T, k kind[Spec, Status], key triggers.Key, spec Spec) *object[Spec, Status] {
	t.Helper()
	o, err := k.create(ctx, key, spec)
	if err != nil {
		t.Fatalf("Create(%v): %v", key, err)
	}
	return o
}

func mustGet[Spec, Status any](t *testing.T, k kind[Spec, Status], key triggers.Key) *object[Spec, Status] {
	t.Helper()
	o, err := k.get(ctx, key)
	if err != nil {
		t.Fatalf("Get(%v): %v", key, err)
	}
	return o
}

func testCreateGet[Spec, Status any](t *testing.T, k kind[Spec, Status]) {
	before := time.Now().Add(-time.Second)
	spec := k.spec("hello", 1)
	created := mustCreate(t, k, key("default", "web"), spec)
	var zero Status
	if created.Key != key("default", "web") || created.Generation != 1 {
		t.Errorf("Create = %v generation %d; want default/web generation 1", created.Key, created.Generation)
	}
	if diff := cmp.Diff(spec, created.Spec); diff != "" {
		t.Errorf("created spec (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(zero, created.Status); diff != "" {
		t.Errorf("created status is not the zero status (-want +got):\n%s", diff)
	}
	if created.CreatedAt.Before(before) || created.CreatedAt.Location() != time.UTC || created.UpdatedAt.Before(created.CreatedAt) {
		t.Errorf("CreatedAt %v, UpdatedAt %v; want UTC times of the create", created.CreatedAt, created.UpdatedAt)
	}
	got := mustGet(t, k, created.Key)
	if diff := cmp.Diff(created, got); diff != "" {
		t.Errorf("Get differs from what Create returned (-create +get):\n%s", diff)
	}
	// The same name in another namespace is another object.
	other := mustCreate(t, k, key("other", "web"), k.spec("hello", 2))
	if diff := cmp.Diff(spec, mustGet(t, k, created.Key).Spec); diff != "" || other.Generation != 1 {
		t.Errorf("a create in another namespace changed the first object (-want +got):\n%s", diff)
	}
}

func testCreateExisting[Spec, Status any](t *testing.T, k kind[Spec, Status]) {
	first := mustCreate(t, k, key("default", "web"), k.spec("hello", 1))
	if _, err := k.create(ctx, first.Key, k.spec("other", 2)); !errors.Is(err, triggers.ErrAlreadyExists) {
		t.Errorf("second Create = %v; want ErrAlreadyExists", err)
	}
	if diff := cmp.Diff(first, mustGet(t, k, first.Key)); diff != "" {
		t.Errorf("a refused Create changed the object (-want +got):\n%s", diff)
	}
}

func testMissing[Spec, Status any](t *testing.T, k kind[Spec, Status]) {
	mustCreate(t, k, key("default", "present"), k.spec("hello", 1))
	missing := key("default", "missing")
	if _, err := k.get(ctx, missing); !errors.Is(err, triggers.ErrNotFound) {
		t.Errorf("Get = %v; want ErrNotFound", err)
	}
	if _, err := k.updateSpec(ctx, missing, k.spec("hello", 1)); !errors.Is(err, triggers.ErrNotFound) {
		t.Errorf("UpdateSpec = %v; want ErrNotFound", err)
	}
	if err := k.updateStatus(ctx, missing, k.status(1)); !errors.Is(err, triggers.ErrNotFound) {
		t.Errorf("UpdateStatus = %v; want ErrNotFound", err)
	}
	if err := k.delete(ctx, missing); !errors.Is(err, triggers.ErrNotFound) {
		t.Errorf("Delete = %v; want ErrNotFound", err)
	}
	if _, err := k.get(ctx, key("elsewhere", "present")); !errors.Is(err, triggers.ErrNotFound) {
		t.Errorf("Get in another namespace = %v; want ErrNotFound", err)
	}
}

func testDelete[Spec, Status any](t *testing.T, k kind[Spec, Status]) {
	o := mustCreate(t, k, key("default", "web"), k.spec("hello", 1))
	kept := mustCreate(t, k, key("other", "web"), k.spec("hello", 1))
	if err := k.delete(ctx, o.Key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := k.get(ctx, o.Key); !errors.Is(err, triggers.ErrNotFound) {
		t.Errorf("Get after Delete = %v; want ErrNotFound", err)
	}
	if err := k.delete(ctx, o.Key); !errors.Is(err, triggers.ErrNotFound) {
		t.Errorf("second Delete = %v; want ErrNotFound", err)
	}
	mustGet(t, k, kept.Key)
	// A name can be used again, from generation 1.
	again := mustCreate(t, k, o.Key, k.spec("hello", 3))
	if again.Generation != 1 {
		t.Errorf("re-created object has generation %d; want 1", again.Generation)
	}
}

func testListPages[Spec, Status any](t *testing.T, k kind[Spec, Status]) {
	for i := 9; i >= 0; i-- {
		mustCreate(t, k, key("ns", fmt.Sprintf("t-%d", i)), k.spec("hello", i))
	}
	mustCreate(t, k, key("ns-2", "not-listed"), k.spec("hello", 0))
	var names []string
	after, pages := "", 0
	for {
		items, more, err := k.list(ctx, "ns", triggers.ListOptions{Limit: 4, After: after})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, o := range items {
			names = append(names, o.Key.Name)
		}
		if !more || pages > 10 {
			break
		}
		after = items[len(items)-1].Key.Name
	}
	want := []string{"t-0", "t-1", "t-2", "t-3", "t-4", "t-5", "t-6", "t-7", "t-8", "t-9"}
	if diff := cmp.Diff(want, names); diff != "" || pages != 3 {
		t.Errorf("%d pages (want 3), names (-want +got):\n%s", pages, diff)
	}
	items, more, err := k.list(ctx, "ns", triggers.ListOptions{Limit: 10})
	if err != nil || len(items) != 10 || more {
		t.Errorf("a page of exactly every object: %d items, more %v, %v; want 10, false", len(items), more, err)
	}
	items, more, err = k.list(ctx, "empty", triggers.ListOptions{Limit: 10})
	if err != nil || len(items) != 0 || more {
		t.Errorf("an empty namespace: %d items, more %v, %v; want none", len(items), more, err)
	}
	got := mustGet(t, k, key("ns", "t-3"))
	page, _, err := k.list(ctx, "ns", triggers.ListOptions{Limit: 1, After: "t-2"})
	if err != nil || len(page) != 1 {
		t.Fatalf("List after t-2: %d items, %v", len(page), err)
	}
	if diff := cmp.Diff(got, page[0]); diff != "" {
		t.Errorf("a listed object differs from Get (-get +list):\n%s", diff)
	}
}

func testByFunction[Spec, Status any](t *testing.T, k kind[Spec, Status]) {
	mustCreate(t, k, key("a", "z"), k.spec("f", 1))
	mustCreate(t, k, key("a", "y"), k.spec("f", 2))
	mustCreate(t, k, key("a", "x"), k.spec("g", 3))
	mustCreate(t, k, key("b", "w"), k.spec("f", 4))
	names := func(ns, fn string) []string {
		t.Helper()
		objs, err := k.byFunction(ctx, ns, fn)
		if err != nil {
			t.Fatalf("ByFunction(%s, %s): %v", ns, fn, err)
		}
		var out []string
		for _, o := range objs {
			out = append(out, o.Key.Name)
		}
		return out
	}
	if diff := cmp.Diff([]string{"y", "z"}, names("a", "f")); diff != "" {
		t.Errorf("ByFunction(a, f) (-want +got):\n%s", diff)
	}
	// A spec update that names another function moves the object.
	if _, err := k.updateSpec(ctx, key("a", "z"), k.spec("g", 5)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"y"}, names("a", "f")); diff != "" {
		t.Errorf("ByFunction(a, f) after the update (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"x", "z"}, names("a", "g")); diff != "" {
		t.Errorf("ByFunction(a, g) after the update (-want +got):\n%s", diff)
	}
	if got := names("a", "none"); len(got) != 0 {
		t.Errorf("ByFunction of a function without objects = %v; want none", got)
	}
}

func testKeys[Spec, Status any](t *testing.T, k kind[Spec, Status]) {
	if keys, err := k.keys(ctx); err != nil || len(keys) != 0 {
		t.Errorf("Keys of an empty store = %v, %v; want none", keys, err)
	}
	for _, kk := range []triggers.Key{key("b", "x"), key("a", "z"), key("a", "y")} {
		mustCreate(t, k, kk, k.spec("f", 1))
	}
	keys, err := k.keys(ctx)
	if diff := cmp.Diff([]triggers.Key{key("a", "y"), key("a", "z"), key("b", "x")}, keys); err != nil || diff != "" {
		t.Errorf("Keys: %v; (-want +got):\n%s", err, diff)
	}
}

func testIndependent[Spec, Status any](t *testing.T, k kind[Spec, Status]) {
	o := mustCreate(t, k, key("default", "web"), k.spec("hello", 1))
	st := k.status(7)
	if err := k.updateStatus(ctx, o.Key, st); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, k, o.Key)
	if diff := cmp.Diff(st, got.Status); diff != "" {
		t.Errorf("status after UpdateStatus (-want +got):\n%s", diff)
	}
	if got.Generation != 1 {
		t.Errorf("UpdateStatus changed the generation to %d; want 1", got.Generation)
	}
	spec := k.spec("hello", 2)
	updated, err := k.updateSpec(ctx, o.Key, spec)
	if err != nil {
		t.Fatal(err)
	}
	if updated.Generation != 2 || updated.CreatedAt != o.CreatedAt || updated.UpdatedAt.Before(o.UpdatedAt) {
		t.Errorf("UpdateSpec: generation %d, created %v, updated %v; want 2, %v, not before %v",
			updated.Generation, updated.CreatedAt, updated.UpdatedAt, o.CreatedAt, o.UpdatedAt)
	}
	if diff := cmp.Diff(spec, updated.Spec); diff != "" {
		t.Errorf("spec after UpdateSpec (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(st, updated.Status); diff != "" {
		t.Errorf("UpdateSpec changed the status (-want +got):\n%s", diff)
	}
	// A status written from an object read before the spec update keeps
	// the new spec.
	if err := k.updateStatus(ctx, o.Key, k.status(8)); err != nil {
		t.Fatal(err)
	}
	got = mustGet(t, k, o.Key)
	if diff := cmp.Diff(spec, got.Spec); diff != "" || got.Generation != 2 {
		t.Errorf("UpdateStatus changed the spec or generation %d (-want +got):\n%s", got.Generation, diff)
	}
	if diff := cmp.Diff(k.status(8), got.Status); diff != "" {
		t.Errorf("status after the second UpdateStatus (-want +got):\n%s", diff)
	}
	// A zero status replaces the whole status.
	var zero Status
	if err := k.updateStatus(ctx, o.Key, zero); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(zero, mustGet(t, k, o.Key).Status); diff != "" {
		t.Errorf("UpdateStatus with the zero status kept fields (-want +got):\n%s", diff)
	}
}

// testCopies checks that a caller changing what a store returned, or what
// it passed in, changes nothing stored: the spec's pointers and raw JSON
// are not shared.
func testCopies[Spec, Status any](t *testing.T, k kind[Spec, Status]) {
	spec := k.spec("hello", 1)
	o := mustCreate(t, k, key("default", "web"), spec)
	want := k.spec("hello", 1)
	mutate(&spec)
	mutate(&o.Spec)
	got := mustGet(t, k, o.Key)
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("changing the created or returned spec changed the stored one (-want +got):\n%s", diff)
	}
	mutate(&got.Spec)
	if diff := cmp.Diff(want, mustGet(t, k, o.Key).Spec); diff != "" {
		t.Errorf("changing a read spec changed the stored one (-want +got):\n%s", diff)
	}
}

// mutate changes, in place, what a spec refers to.
func mutate(spec any) {
	switch s := spec.(type) {
	case *triggers.Spec:
		*s.Enabled = !*s.Enabled
		*s.MaxRetries = 99
		s.CronSpec.Payload[1] = 'X'
	case *triggers.JobSpec:
		s.Payload[1] = 'X'
	}
}

// testConcurrent checks that no spec update is lost: each of them changes
// the spec (the object starts with a spec none of them writes), so each
// increments the generation.
func testConcurrent[Spec, Status any](t *testing.T, k kind[Spec, Status]) {
	const n = 20
	o := mustCreate(t, k, key("default", "busy"), k.spec("hello", n))
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() {
			_, err := k.updateSpec(ctx, o.Key, k.spec("hello", i))
			errs <- err
		})
		wg.Go(func() { errs <- k.updateStatus(ctx, o.Key, k.status(i)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := mustGet(t, k, o.Key); got.Generation != 1+n {
		t.Errorf("generation %d after %d concurrent spec updates; want %d", got.Generation, n, 1+n)
	}
}

func testAll(t *testing.T, s triggers.Store) {
	if all, err := s.All(ctx); err != nil || len(all) != 0 {
		t.Errorf("All of an empty store = %d triggers, %v; want none", len(all), err)
	}
	for _, k := range []triggers.Key{key("b", "x"), key("a", "z"), key("a", "y")} {
		if _, err := s.Create(ctx, &triggers.Trigger{Namespace: k.Namespace, Name: k.Name, Spec: sampleTrigger("f", 1)}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []triggers.Key
	for _, tr := range all {
		keys = append(keys, tr.Key())
		if diff := cmp.Diff(sampleTrigger("f", 1), tr.Spec); diff != "" {
			t.Errorf("All: the spec of %v (-want +got):\n%s", tr.Key(), diff)
		}
	}
	if diff := cmp.Diff([]triggers.Key{key("a", "y"), key("a", "z"), key("b", "x")}, keys); diff != "" {
		t.Errorf("All: keys (-want +got):\n%s", diff)
	}
}
