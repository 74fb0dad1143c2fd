package control

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/reconcile"
	"sless.kube5s.ru/sless/modules/triggers/trstore"
	"sless.kube5s.ru/sless/modules/triggers/trstoretest"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// backends are the stores that the reconciler tables run on: the in-memory
// stores and the gorm stores on SQLite, as a store of custom resources
// will later.
var backends = []struct {
	name string
	open func(t *testing.T) (triggers.Store, triggers.JobStore)
}{
	{"memory", func(*testing.T) (triggers.Store, triggers.JobStore) {
		return trstoretest.NewTriggers(), trstoretest.NewJobs()
	}},
	{"sqlite", func(t *testing.T) (triggers.Store, triggers.JobStore) {
		db, _, err := sqldb.Open("sqlite:"+filepath.Join(t.TempDir(), "db.sqlite"), discard)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sqldb.Close(db) })
		if err := sqldb.Migrate(context.Background(), db, trstore.Migrations()); err != nil {
			t.Fatal(err)
		}
		return trstore.NewTriggers(db), trstore.NewJobs(db)
	}},
}

// fakeFunctions is a functions.Store that knows which functions exist;
// only Get is used.
type fakeFunctions struct {
	functions.Store
	exist map[functions.Key]bool
	err   error
}

func (f *fakeFunctions) Get(_ context.Context, k functions.Key) (*functions.Function, error) {
	switch {
	case f.err != nil:
		return nil, f.err
	case f.exist[k]:
		return &functions.Function{Namespace: k.Namespace, Name: k.Name}, nil
	}
	return nil, functions.ErrNotFound
}

// fakeRunner records what it is told; Apply fails with err.
type fakeRunner struct {
	typ   string
	err   error
	mu    *sync.Mutex
	calls *[]string
}

func (r fakeRunner) record(op string, k triggers.Key) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.calls = append(*r.calls, op+" "+r.typ+" "+k.String())
}

func (r fakeRunner) Apply(_ context.Context, t *triggers.Trigger) error {
	r.record("apply", t.Key())
	return r.err
}

func (r fakeRunner) Remove(k triggers.Key) { r.record("remove", k) }

func (r fakeRunner) Stop(context.Context) error { return nil }

// failingTriggers is a trigger store whose reads fail.
type failingTriggers struct {
	triggers.Store
	err error
}

func (f failingTriggers) Get(context.Context, triggers.Key) (*triggers.Trigger, error) {
	return nil, f.err
}

func ptr[T any](v T) *T { return &v }

// trigger returns a trigger of function f in namespace ns.
func trigger(name, typ string, mutate ...func(*triggers.Trigger)) *triggers.Trigger {
	t := &triggers.Trigger{Namespace: "ns", Name: name, Spec: triggers.Spec{Function: "f", Type: typ}}
	if typ == triggers.TypeCron {
		t.Schedule = "@hourly"
	}
	for _, m := range mutate {
		m(t)
	}
	return t
}

func disabled(t *triggers.Trigger) { t.Enabled = ptr(false) }

// TestTriggerReconciler is a table in the style of Knative's reconciler
// tests: objects in (stored triggers with their status, existing functions,
// what /fn exposes already), one reconcile of a key, and what must come
// out: the status written, the calls to the runners, what /fn exposes, the
// functions told their exposure changed, the requeue.
func TestTriggerReconciler(t *testing.T) {
	fn := functions.Key{Namespace: "ns", Name: "f"}
	key := triggers.Key{Namespace: "ns", Name: "t"}
	boom := errors.New("boom")
	next := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	removeAll := []string{"remove cron ns/t", "remove rabbitmq ns/t"}
	tests := []struct {
		name string
		// Objects in.
		trigger   *triggers.Trigger // stored as key, nil for none
		status    *triggers.Status  // its stored status
		updates   int               // spec updates after the create (the generation is 1+updates)
		noFn      bool              // the function does not exist
		fnErr     error             // looking the function up fails
		storeErr  error             // reading the trigger fails
		runnerErr error             // the runner refuses the trigger
		exposed   *reconcile.Exposure
		// Wanted out.
		wantStatus   *triggers.Status
		wantCalls    []string
		wantAccess   invoke.Access
		wantNotified []functions.Key
		wantRequeue  time.Duration
		wantErr      error
	}{{
		name:         "an http trigger exposes its function",
		trigger:      trigger("t", triggers.TypeHTTP),
		wantStatus:   &triggers.Status{Phase: triggers.PhaseActive, ObservedGeneration: 1},
		wantCalls:    removeAll,
		wantAccess:   invoke.Access{Exposed: true},
		wantNotified: []functions.Key{fn},
	}, {
		name:         "a token http trigger makes it private",
		trigger:      trigger("t", triggers.TypeHTTP, func(t *triggers.Trigger) { t.Auth = triggers.AuthToken }),
		updates:      2,
		wantStatus:   &triggers.Status{Phase: triggers.PhaseActive, ObservedGeneration: 3},
		wantCalls:    removeAll,
		wantAccess:   invoke.Access{Exposed: true, TokenRequired: true},
		wantNotified: []functions.Key{fn},
	}, {
		name:       "an http trigger already exposed changes nothing",
		trigger:    trigger("t", triggers.TypeHTTP),
		exposed:    &reconcile.Exposure{Function: fn},
		wantStatus: &triggers.Status{Phase: triggers.PhaseActive, ObservedGeneration: 1},
		wantCalls:  removeAll,
		wantAccess: invoke.Access{Exposed: true},
	}, {
		name:         "a disabled http trigger closes /fn and keeps its counts",
		trigger:      trigger("t", triggers.TypeHTTP, disabled),
		status:       &triggers.Status{Phase: triggers.PhaseActive, Fired: 5, Succeeded: 4, ObservedGeneration: 1},
		updates:      1,
		exposed:      &reconcile.Exposure{Function: fn},
		wantStatus:   &triggers.Status{Phase: triggers.PhaseDisabled, Fired: 5, Succeeded: 4, ObservedGeneration: 2},
		wantCalls:    removeAll,
		wantNotified: []functions.Key{fn},
	}, {
		name:       "a cron trigger runs in the cron runner only",
		trigger:    trigger("t", triggers.TypeCron),
		wantStatus: &triggers.Status{Phase: triggers.PhaseActive, ObservedGeneration: 1},
		wantCalls:  []string{"apply cron ns/t", "remove rabbitmq ns/t"},
	}, {
		name:       "a spec the runner refuses is an Error",
		trigger:    trigger("t", triggers.TypeRabbitMQ),
		runnerErr:  errors.New("queue is gone"),
		wantStatus: &triggers.Status{Phase: triggers.PhaseError, Message: "queue is gone", ObservedGeneration: 1},
		wantCalls:  []string{"apply rabbitmq ns/t", "remove cron ns/t"},
	}, {
		name:    "a missing function is an Error looked at again",
		trigger: trigger("t", triggers.TypeCron),
		noFn:    true,
		wantStatus: &triggers.Status{Phase: triggers.PhaseError, ObservedGeneration: 1,
			Message: `function "f" does not exist in namespace "ns"`},
		wantCalls:   removeAll,
		wantRequeue: reconcile.MissingFunctionRetry,
	}, {
		name:         "an http trigger of a missing function exposes nothing",
		trigger:      trigger("t", triggers.TypeHTTP),
		noFn:         true,
		exposed:      &reconcile.Exposure{Function: fn},
		wantStatus:   &triggers.Status{Phase: triggers.PhaseError, ObservedGeneration: 1, Message: `function "f" does not exist in namespace "ns"`},
		wantCalls:    removeAll,
		wantNotified: []functions.Key{fn},
		wantRequeue:  reconcile.MissingFunctionRetry,
	}, {
		name:       "a disabled trigger does not look for its function",
		trigger:    trigger("t", triggers.TypeCron, disabled),
		fnErr:      boom,
		wantStatus: &triggers.Status{Phase: triggers.PhaseDisabled, ObservedGeneration: 1},
		wantCalls:  removeAll,
	}, {
		name:       "an inactive cron trigger has no next run",
		trigger:    trigger("t", triggers.TypeCron, disabled),
		status:     &triggers.Status{Phase: triggers.PhaseActive, NextFireAt: &next, Fired: 1},
		wantStatus: &triggers.Status{Phase: triggers.PhaseDisabled, Fired: 1, ObservedGeneration: 1},
		wantCalls:  removeAll,
	}, {
		name:         "a deleted trigger stops everywhere",
		exposed:      &reconcile.Exposure{Function: fn, TokenRequired: true},
		wantCalls:    removeAll,
		wantNotified: []functions.Key{fn},
	}, {
		name:     "a failed read changes nothing",
		storeErr: boom,
		exposed:  &reconcile.Exposure{Function: fn},
		// The trigger is not stored: nothing to compare.
		wantAccess: invoke.Access{Exposed: true},
		wantErr:    boom,
	}, {
		name:       "a failed function look-up changes nothing",
		trigger:    trigger("t", triggers.TypeHTTP),
		status:     &triggers.Status{Phase: triggers.PhaseActive, Fired: 2},
		fnErr:      boom,
		exposed:    &reconcile.Exposure{Function: fn},
		wantStatus: &triggers.Status{Phase: triggers.PhaseActive, Fired: 2},
		wantAccess: invoke.Access{Exposed: true},
		wantErr:    boom,
	}}
	for _, b := range backends {
		for _, tc := range tests {
			t.Run(b.name+"/"+tc.name, func(t *testing.T) {
				ctx := context.Background()
				base, _ := b.open(t)
				var store triggers.Store = base
				if tc.storeErr != nil {
					store = failingTriggers{Store: base, err: tc.storeErr}
				}
				if tc.trigger != nil {
					if _, err := base.Create(ctx, tc.trigger); err != nil {
						t.Fatal(err)
					}
					for range tc.updates {
						if _, err := base.UpdateSpec(ctx, key, tc.trigger.Spec); err != nil {
							t.Fatal(err)
						}
					}
					if tc.status != nil {
						if err := base.UpdateStatus(ctx, key, *tc.status); err != nil {
							t.Fatal(err)
						}
					}
				}
				fns := &fakeFunctions{exist: map[functions.Key]bool{fn: !tc.noFn}, err: tc.fnErr}
				var mu sync.Mutex
				var calls []string
				runners := map[string]triggers.Runner{
					triggers.TypeCron:     fakeRunner{typ: triggers.TypeCron, err: tc.runnerErr, mu: &mu, calls: &calls},
					triggers.TypeRabbitMQ: fakeRunner{typ: triggers.TypeRabbitMQ, err: tc.runnerErr, mu: &mu, calls: &calls},
				}
				gate := NewGate()
				if tc.exposed != nil {
					gate.set(key, *tc.exposed)
				}
				var notified []functions.Key
				notifier := functions.NotifierFunc(func(k functions.Key) { notified = append(notified, k) })
				keeper := NewStatusKeeper(base, discard)
				r := reconcile.New(store, fns, NewLocal(base, runners, gate, keeper, notifier, discard))

				res, err := r.Reconcile(ctx, key)

				if !errors.Is(err, tc.wantErr) || (err != nil) != (tc.wantErr != nil) {
					t.Errorf("Reconcile error = %v; want %v", err, tc.wantErr)
				}
				if res.RequeueAfter != tc.wantRequeue {
					t.Errorf("RequeueAfter = %v; want %v", res.RequeueAfter, tc.wantRequeue)
				}
				got, err := base.Get(ctx, key)
				switch {
				case tc.wantStatus == nil && !errors.Is(err, triggers.ErrNotFound):
					t.Errorf("Get after the reconcile = %v; want the trigger absent", err)
				case tc.wantStatus != nil && err != nil:
					t.Fatal(err)
				case tc.wantStatus != nil:
					if diff := cmp.Diff(*tc.wantStatus, got.Status); diff != "" {
						t.Errorf("status (-want +got):\n%s", diff)
					}
				}
				slices.Sort(calls)
				if diff := cmp.Diff(tc.wantCalls, calls); diff != "" {
					t.Errorf("runner calls (-want +got):\n%s", diff)
				}
				if got := gate.Access(fn.Namespace, fn.Name); got != tc.wantAccess {
					t.Errorf("/fn access %+v; want %+v", got, tc.wantAccess)
				}
				if diff := cmp.Diff(tc.wantNotified, notified); diff != "" {
					t.Errorf("functions told of an exposure change (-want +got):\n%s", diff)
				}
				keeper.mu.Lock()
				_, tracked := keeper.statuses[key]
				keeper.mu.Unlock()
				if wantTracked := tc.wantStatus != nil && tc.wantErr == nil; tracked != wantTracked {
					t.Errorf("keeper tracks the trigger: %v; want %v", tracked, wantTracked)
				}
			})
		}
	}
}
