package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/triggers"
)

// fakeInvoker answers every invocation with answer and records the
// requests.
type fakeInvoker struct {
	answer func(req invoke.Request) (*invoke.Response, error)
	mu     sync.Mutex
	reqs   []invoke.Request
}

func (f *fakeInvoker) Invoke(_ context.Context, req invoke.Request) (*invoke.Response, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	return f.answer(req)
}

// fakeLedger holds records by invocation id; only Get is used.
type fakeLedger struct {
	invoke.Ledger
	records map[string]*invoke.Record
}

func (l *fakeLedger) Get(_ context.Context, _, id string) (*invoke.Record, error) {
	if r, ok := l.records[id]; ok {
		return r, nil
	}
	return nil, invoke.ErrNotFound
}

// TestJobReconciler is a table in the style of Knative's reconciler tests:
// a stored job with its status and what the ledger holds in; the job
// reconciled, again each time it asks to be, until it settles; the status,
// the invocations made and the requests to reconcile again out. The clock
// stands still at now and invocation ids count inv-1, inv-2...
func TestJobReconciler(t *testing.T) {
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	earlier := now.Add(-time.Hour)
	key := triggers.Key{Namespace: "ns", Name: "once"}
	ok := func(body string) func(invoke.Request) (*invoke.Response, error) {
		return func(invoke.Request) (*invoke.Response, error) {
			return &invoke.Response{StatusCode: 200, Body: []byte(body)}, nil
		}
	}
	stopped := "the server stopped while this run was in progress and no outcome was recorded; raise run_id to run it again"
	tests := []struct {
		name string
		// Objects in.
		spec    *triggers.JobSpec // nil: no job
		status  triggers.JobStatus
		records map[string]*invoke.Record
		answer  func(invoke.Request) (*invoke.Response, error)
		// during runs inside the invocation, with the store.
		during func(s triggers.JobStore)
		// Wanted out.
		wantStatus *triggers.JobStatus // nil: the job is gone
		wantRuns   []string            // "run_id invocation_id"
	}{{
		name:       "run_id 0 does not run",
		spec:       &triggers.JobSpec{Function: "f"},
		wantStatus: &triggers.JobStatus{ObservedGeneration: 1},
	}, {
		name:   "a new run_id runs once and succeeds",
		spec:   &triggers.JobSpec{Function: "f", RunID: 1, Payload: json.RawMessage(`{"a":1}`)},
		answer: ok(`{"done":true}`),
		wantStatus: &triggers.JobStatus{Phase: triggers.JobSucceeded, RunID: 1, InvocationID: "inv-1", StartedAt: &now,
			FinishedAt: &now, StatusCode: 200, Result: `{"done":true}`, ObservedGeneration: 1},
		wantRuns: []string{"1 inv-1"},
	}, {
		name: "the invocation's error fails the run",
		spec: &triggers.JobSpec{Function: "f", RunID: 1},
		answer: func(invoke.Request) (*invoke.Response, error) {
			return &invoke.Response{StatusCode: 500, Body: []byte("trace"), Error: "ZeroDivisionError"}, nil
		},
		wantStatus: &triggers.JobStatus{Phase: triggers.JobFailed, RunID: 1, InvocationID: "inv-1", StartedAt: &now,
			FinishedAt: &now, StatusCode: 500, Result: "trace", Error: "ZeroDivisionError", ObservedGeneration: 1},
		wantRuns: []string{"1 inv-1"},
	}, {
		name: "a non-2xx answer without an error names the status",
		spec: &triggers.JobSpec{Function: "f", RunID: 1},
		answer: func(invoke.Request) (*invoke.Response, error) {
			return &invoke.Response{StatusCode: 404}, nil
		},
		wantStatus: &triggers.JobStatus{Phase: triggers.JobFailed, RunID: 1, InvocationID: "inv-1", StartedAt: &now,
			FinishedAt: &now, StatusCode: 404, Error: "the function answered HTTP 404", ObservedGeneration: 1},
		wantRuns: []string{"1 inv-1"},
	}, {
		name: "an invocation that cannot start fails the run",
		spec: &triggers.JobSpec{Function: "f", RunID: 3},
		answer: func(invoke.Request) (*invoke.Response, error) {
			return nil, errors.New(`function "f" is not ready`)
		},
		wantStatus: &triggers.JobStatus{Phase: triggers.JobFailed, RunID: 3, InvocationID: "inv-1", StartedAt: &now,
			FinishedAt: &now, Error: `function "f" is not ready`, ObservedGeneration: 1},
		wantRuns: []string{"3 inv-1"},
	}, {
		name:   "a long result is capped",
		spec:   &triggers.JobSpec{Function: "f", RunID: 1},
		answer: ok(strings.Repeat("r", triggers.MaxJobResultBytes+10)),
		wantStatus: &triggers.JobStatus{Phase: triggers.JobSucceeded, RunID: 1, InvocationID: "inv-1", StartedAt: &now,
			FinishedAt: &now, StatusCode: 200, Result: strings.Repeat("r", triggers.MaxJobResultBytes), ObservedGeneration: 1},
		wantRuns: []string{"1 inv-1"},
	}, {
		name:       "a run_id lowered does nothing",
		spec:       &triggers.JobSpec{Function: "f", RunID: 1},
		status:     triggers.JobStatus{Phase: triggers.JobSucceeded, RunID: 2, ObservedGeneration: 1},
		wantStatus: &triggers.JobStatus{Phase: triggers.JobSucceeded, RunID: 2, ObservedGeneration: 1},
	}, {
		name:    "a run left Running is settled from the ledger, not run again",
		spec:    &triggers.JobSpec{Function: "f", RunID: 1},
		status:  triggers.JobStatus{Phase: triggers.JobRunning, RunID: 1, InvocationID: "old", StartedAt: &earlier, ObservedGeneration: 1},
		records: map[string]*invoke.Record{"old": {ID: "old", StatusCode: 201}},
		wantStatus: &triggers.JobStatus{Phase: triggers.JobSucceeded, RunID: 1, InvocationID: "old", StartedAt: &earlier,
			FinishedAt: &now, StatusCode: 201, ObservedGeneration: 1},
	}, {
		name:   "a run left Running that the ledger never saw failed",
		spec:   &triggers.JobSpec{Function: "f", RunID: 1},
		status: triggers.JobStatus{Phase: triggers.JobRunning, RunID: 1, InvocationID: "old", StartedAt: &earlier, ObservedGeneration: 1},
		wantStatus: &triggers.JobStatus{Phase: triggers.JobFailed, RunID: 1, InvocationID: "old", StartedAt: &earlier,
			FinishedAt: &now, Error: stopped, ObservedGeneration: 1},
	}, {
		name:   "a run the stop interrupted says how to run it again",
		spec:   &triggers.JobSpec{Function: "f", RunID: 1},
		status: triggers.JobStatus{Phase: triggers.JobRunning, RunID: 1, InvocationID: "old", StartedAt: &earlier, ObservedGeneration: 1},
		records: map[string]*invoke.Record{"old": {ID: "old", StatusCode: invoke.InterruptedStatus,
			Error: invoke.InterruptedError}},
		wantStatus: &triggers.JobStatus{Phase: triggers.JobFailed, RunID: 1, InvocationID: "old", StartedAt: &earlier,
			FinishedAt: &now, StatusCode: invoke.InterruptedStatus, Error: invoke.InterruptedError + "; raise run_id to run it again",
			ObservedGeneration: 1},
	}, {
		name:    "a settled run raised meanwhile runs the new run_id",
		spec:    &triggers.JobSpec{Function: "f", RunID: 2},
		status:  triggers.JobStatus{Phase: triggers.JobRunning, RunID: 1, InvocationID: "old", StartedAt: &earlier, ObservedGeneration: 1},
		records: map[string]*invoke.Record{"old": {ID: "old", StatusCode: 200}},
		answer:  ok("second"),
		wantStatus: &triggers.JobStatus{Phase: triggers.JobSucceeded, RunID: 2, InvocationID: "inv-1", StartedAt: &now,
			FinishedAt: &now, StatusCode: 200, Result: "second", ObservedGeneration: 1},
		wantRuns: []string{"2 inv-1"},
	}, {
		name:   "a run_id raised during a run runs once more after it",
		spec:   &triggers.JobSpec{Function: "f", RunID: 1},
		answer: ok("done"),
		during: func(s triggers.JobStore) {
			j, err := s.Get(context.Background(), key)
			if err == nil && j.RunID == 1 {
				_, _ = s.UpdateSpec(context.Background(), key, triggers.JobSpec{Function: "f", RunID: 2})
			}
		},
		wantStatus: &triggers.JobStatus{Phase: triggers.JobSucceeded, RunID: 2, InvocationID: "inv-2", StartedAt: &now,
			FinishedAt: &now, StatusCode: 200, Result: "done", ObservedGeneration: 2},
		wantRuns: []string{"1 inv-1", "2 inv-2"},
	}, {
		name:   "a job deleted during its run records nothing",
		spec:   &triggers.JobSpec{Function: "f", RunID: 1},
		answer: ok("done"),
		during: func(s triggers.JobStore) { _ = s.Delete(context.Background(), key) },
		// The job is gone: nothing is written for it after the run.
		wantRuns: []string{"1 inv-1"},
	}, {
		name: "a job that does not exist is nothing to do",
	}}
	for _, b := range backends {
		for _, tc := range tests {
			t.Run(b.name+"/"+tc.name, func(t *testing.T) {
				ctx := context.Background()
				_, store := b.open(t)
				if tc.spec != nil {
					if _, err := store.Create(ctx, &triggers.Job{Namespace: key.Namespace, Name: key.Name, JobSpec: *tc.spec}); err != nil {
						t.Fatal(err)
					}
					if err := store.UpdateStatus(ctx, key, tc.status); err != nil {
						t.Fatal(err)
					}
				}
				inv := &fakeInvoker{answer: func(req invoke.Request) (*invoke.Response, error) {
					if tc.during != nil {
						tc.during(store)
					}
					if tc.answer == nil {
						return nil, errors.New("no invocation expected")
					}
					return tc.answer(req)
				}}
				r := NewJobReconciler(store, inv, &fakeLedger{records: tc.records}, discard)
				r.now = func() time.Time { return now }
				ids := 0
				r.newID = func() string { ids++; return fmt.Sprintf("inv-%d", ids) }
				var mu sync.Mutex
				var enqueued []triggers.Key
				r.Enqueue = func(k triggers.Key) { mu.Lock(); enqueued = append(enqueued, k); mu.Unlock() }
				if err := r.Start(ctx); err != nil {
					t.Fatal(err)
				}

				// Reconcile until the job asks for nothing more, as the
				// controller would.
				pending := []triggers.Key{key}
				for round := 0; len(pending) > 0; round++ {
					if round == 10 {
						t.Fatalf("still enqueued after %d rounds: %v", round, pending)
					}
					for _, k := range pending {
						if _, err := r.Reconcile(ctx, k); err != nil {
							t.Fatalf("Reconcile: %v", err)
						}
					}
					r.wg.Wait()
					mu.Lock()
					pending, enqueued = enqueued, nil
					mu.Unlock()
				}
				if err := r.Stop(ctx); err != nil {
					t.Fatal(err)
				}

				got, err := store.Get(ctx, key)
				switch {
				case tc.wantStatus == nil && !errors.Is(err, triggers.ErrNotFound):
					t.Errorf("Get = %+v, %v; want the job absent", got, err)
				case tc.wantStatus != nil && err != nil:
					t.Fatal(err)
				case tc.wantStatus != nil:
					if diff := cmp.Diff(*tc.wantStatus, got.Status); diff != "" {
						t.Errorf("status (-want +got):\n%s", diff)
					}
				}
				var runs []string
				for _, req := range inv.reqs {
					runs = append(runs, fmt.Sprintf("%v %s", req.TriggerMeta["run_id"], req.InvocationID))
					if req.Namespace != key.Namespace || req.Function != "f" || req.TriggerKind != invoke.KindJob || req.TriggerName != key.Name {
						t.Errorf("request %+v; want a job run of ns/f named %s", req, key.Name)
					}
				}
				if diff := cmp.Diff(tc.wantRuns, runs); diff != "" {
					t.Errorf("runs (-want +got):\n%s", diff)
				}
				if tc.spec != nil && tc.spec.Payload != nil && len(inv.reqs) > 0 && string(inv.reqs[0].Body) != string(tc.spec.Payload) {
					t.Errorf("body %s; want the payload %s", inv.reqs[0].Body, tc.spec.Payload)
				}
			})
		}
	}
}
