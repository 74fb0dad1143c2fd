package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"sless.kube5s.ru/sless/internal/keylock"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/reconciler"
	"sless.kube5s.ru/sless/modules/triggers"
)

// JobReconciler runs a job's function once for every new run_id.
//
// At most once: the run is recorded as Running, with the invocation id it
// will use, before the function is invoked. A server that stops in the
// middle finds the run Running after its restart and does not run it again:
// it takes the outcome from the invocation ledger, or marks the run Failed
// when the ledger never saw it finish.
type JobReconciler struct {
	store   triggers.JobStore
	invoker invoke.Invoker
	ledger  invoke.Ledger
	log     *slog.Logger
	// Enqueue asks for a job to be reconciled again; set by the driver.
	Enqueue func(triggers.Key)
	// now and newID are the clock and the invocation ids; tests replace
	// them.
	now   func() time.Time
	newID func() string

	mu      sync.Mutex
	running map[triggers.Key]bool
	// locks serializes the status writes of one job between reconciles and
	// its run.
	locks keylock.Map[triggers.Key]

	runCtx    context.Context
	cancelRun context.CancelFunc
	wg        sync.WaitGroup
}

// NewJobReconciler returns the reconciler.
func NewJobReconciler(store triggers.JobStore, invoker invoke.Invoker, ledger invoke.Ledger, log *slog.Logger) *JobReconciler {
	return &JobReconciler{store: store, invoker: invoker, ledger: ledger, log: log,
		now: time.Now, newID: func() string { return uuid.Must(uuid.NewV7()).String() },
		running: map[triggers.Key]bool{}}
}

// Start prepares the context of runs.
func (r *JobReconciler) Start(ctx context.Context) error {
	r.runCtx, r.cancelRun = context.WithCancel(context.WithoutCancel(ctx))
	return nil
}

// Stop waits for runs in flight until ctx ends, then cancels them.
func (r *JobReconciler) Stop(ctx context.Context) error {
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		r.cancelRun()
		return nil
	case <-ctx.Done():
		r.cancelRun()
		<-done
		return fmt.Errorf("job runs did not finish: %w", ctx.Err())
	}
}

func (r *JobReconciler) isRunning(key triggers.Key) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running[key]
}

// Reconcile is a reconciler.Func.
func (r *JobReconciler) Reconcile(ctx context.Context, key triggers.Key) (reconciler.Result, error) {
	defer r.locks.Lock(key)()
	j, err := r.store.Get(ctx, key)
	if errors.Is(err, triggers.ErrNotFound) {
		return reconciler.Result{}, nil
	}
	if err != nil {
		return reconciler.Result{}, err
	}
	st := j.Status
	st.ObservedGeneration = j.Generation
	running := r.isRunning(key)
	if st.Phase == triggers.JobRunning && !running {
		if st, err = r.recover(ctx, j, st); err != nil {
			return reconciler.Result{}, err
		}
	}
	if j.RunID > st.RunID && !running {
		return reconciler.Result{}, r.start(ctx, j, st)
	}
	if st == j.Status {
		return reconciler.Result{}, nil
	}
	return reconciler.Result{}, r.store.UpdateStatus(ctx, key, st)
}

// start records a new run as Running and invokes the function in the
// background.
func (r *JobReconciler) start(ctx context.Context, j *triggers.Job, st triggers.JobStatus) error {
	now := r.now().UTC()
	st = triggers.JobStatus{Phase: triggers.JobRunning, RunID: j.RunID, InvocationID: r.newID(),
		StartedAt: &now, ObservedGeneration: j.Generation}
	if err := r.store.UpdateStatus(ctx, j.Key(), st); err != nil {
		return err
	}
	r.mu.Lock()
	r.running[j.Key()] = true
	r.mu.Unlock()
	r.wg.Go(func() { r.run(j, st) })
	return nil
}

// run invokes the function and records the outcome, unless the job was
// deleted or moved on meanwhile.
func (r *JobReconciler) run(j *triggers.Job, st triggers.JobStatus) {
	key := j.Key()
	defer func() {
		r.mu.Lock()
		delete(r.running, key)
		r.mu.Unlock()
		// A run_id raised during the run starts the next run now.
		r.Enqueue(key)
	}()
	resp, err := r.invoker.Invoke(r.runCtx, invoke.Request{
		Namespace: j.Namespace, Function: j.Function, InvocationID: st.InvocationID,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: j.Payload,
		TriggerKind: invoke.KindJob, TriggerName: j.Name, TriggerMeta: map[string]any{"run_id": j.RunID},
	})
	finished := r.now().UTC()
	st.FinishedAt = &finished
	switch {
	case err != nil:
		st.Phase, st.Error = triggers.JobFailed, err.Error()
	default:
		st.Result = capResult(resp.Body)
		settle(&st, resp.StatusCode, resp.Error)
	}
	r.finish(key, st)
}

// finish writes a run's final status if the job still waits for it.
func (r *JobReconciler) finish(key triggers.Key, st triggers.JobStatus) {
	defer r.locks.Lock(key)()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.runCtx), 10*time.Second)
	defer cancel()
	j, err := r.store.Get(ctx, key)
	if err != nil {
		if !errors.Is(err, triggers.ErrNotFound) {
			r.log.Error("reading a job after its run failed", "job", key.String(), "error", err)
		}
		return
	}
	if j.Status.RunID != st.RunID || j.Status.Phase != triggers.JobRunning {
		return
	}
	st.ObservedGeneration = j.Status.ObservedGeneration
	if err := r.store.UpdateStatus(ctx, key, st); err != nil {
		r.log.Error("recording a job's outcome failed", "job", key.String(), "run_id", st.RunID, "error", err)
	}
}

// recover settles a run left Running by a server that stopped, from the
// ledger, without running it again.
func (r *JobReconciler) recover(ctx context.Context, j *triggers.Job, st triggers.JobStatus) (triggers.JobStatus, error) {
	now := r.now().UTC()
	st.FinishedAt = &now
	rec, err := r.ledger.Get(ctx, j.Namespace, st.InvocationID)
	switch {
	case errors.Is(err, invoke.ErrNotFound):
		st.Phase = triggers.JobFailed
		st.Error = "the server stopped while this run was in progress and no outcome was recorded; raise run_id to run it again"
	case err != nil:
		return st, err
	default:
		// The ledger keeps the outcome, not the response body.
		settle(&st, rec.StatusCode, rec.Error)
		if rec.StatusCode == invoke.InterruptedStatus && rec.Error == invoke.InterruptedError {
			st.Error += "; raise run_id to run it again"
		}
	}
	r.log.Info("settled a job run interrupted by a restart", "job", j.Key().String(), "run_id", st.RunID, "phase", st.Phase)
	return st, nil
}

// settle records the outcome of a run the function answered with code:
// Succeeded for 2xx, else Failed with the invocation's error or the status.
func settle(st *triggers.JobStatus, code int, invocationErr string) {
	st.StatusCode = code
	if code >= 200 && code < 300 {
		st.Phase = triggers.JobSucceeded
		return
	}
	st.Phase, st.Error = triggers.JobFailed, invocationErr
	if st.Error == "" {
		st.Error = fmt.Sprintf("the function answered HTTP %d", code)
	}
}

func capResult(body []byte) string {
	if len(body) > triggers.MaxJobResultBytes {
		body = body[:triggers.MaxJobResultBytes]
	}
	return string(body)
}
