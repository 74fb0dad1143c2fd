// Package reconcile is the one lifecycle of a function, shared by the
// embedded and the cluster mode: desired spec + observed status -> build if
// the code changed (started on one pass, read on a later one) -> deploy the
// last good artifact (or undeploy) -> status.
// It depends on contracts only; the embedded mode drives it from a work
// queue, the cluster mode from controller-runtime.
package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"time"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/reconciler"
	"sless.kube5s.ru/sless/modules/runtime"
)

// Reconciler reconciles functions.
type Reconciler struct {
	store      functions.Store
	builder    build.Builder
	deployer   runtime.Deployer
	suspension functions.Suspension
	notify     func(functions.Key)
	log        *slog.Logger
	phases     PhaseObserver
}

// PhaseObserver hears the phase of every function a pass reconciled, and ""
// for one found deleted, for metrics. It is safe for concurrent use and
// returns quickly.
type PhaseObserver interface {
	Phase(key functions.Key, phase functions.Phase)
}

// ObservePhases makes o hear every function's phase. Call it before the
// driver starts.
func (r *Reconciler) ObservePhases(o PhaseObserver) { r.phases = o }

// The reconciler asks again after these while it waits.
const (
	// buildPoll: for a running build, in case the builder does not notify.
	buildPoll = 10 * time.Second
	// rolloutPoll: for a rollout that is not serving yet.
	rolloutPoll = 2 * time.Second
	// announceAfter is how long a build runs before the status says so,
	// when the builder tells when it started. A build that ends sooner, as
	// most do, goes from the phase before it straight to its result: a
	// Building phase few clients would see cost a durable status write per
	// deploy.
	announceAfter = 300 * time.Millisecond
)

// New returns a reconciler. notify, when not nil, is called with a
// function's key when its build ended, for the driver to reconcile it again.
func New(store functions.Store, builder build.Builder, deployer runtime.Deployer, suspension functions.Suspension,
	notify func(functions.Key), log *slog.Logger) *Reconciler {
	return &Reconciler{store: store, builder: builder, deployer: deployer, suspension: suspension, notify: notify, log: log}
}

// Reconcile brings one function to its desired state and never waits for a
// build or a rollout: a build is a state machine in the status (the build
// key, the BuildSucceeded condition), started on one pass and read on a
// later one, when the builder tells that it ended. It is level-based and
// idempotent: the same code is never built twice, and a failed build is not
// retried until the function changes (a new upload or spec update raises
// the generation). The last good artifact is deployed on every pass, with
// the runtime and handler it was built for, so that a restarted server
// serves what it served before and a failed build never breaks it.
func (r *Reconciler) Reconcile(ctx context.Context, key functions.Key) (reconciler.Result, error) {
	fn, err := r.store.Get(ctx, key)
	if errors.Is(err, functions.ErrNotFound) {
		return reconciler.Result{}, r.Remove(ctx, key)
	}
	if err != nil {
		return reconciler.Result{}, err
	}
	now := time.Now().UTC()
	st := fn.Status
	st.Conditions = slices.Clone(st.Conditions)
	st.ObservedGeneration = fn.Generation
	var res reconciler.Result
	building, quiet, err := r.build(ctx, fn, &st, now)
	if err != nil {
		return res, err
	}
	if building {
		res.RequeueAfter = buildPoll
	}
	// A build not announced yet leaves the stored status as it is: its
	// end, or the requeue when it is due, writes the next one.
	setStatus := r.setStatus
	if quiet > 0 {
		res.RequeueAfter = quiet
		setStatus = func(context.Context, *functions.Function, functions.Status) error { return nil }
	}
	if st.Artifact == "" {
		return res, errors.Join(r.deployer.Undeploy(ctx, key), setStatus(ctx, fn, st))
	}
	// A build's result is recorded even when the deploy fails: the builder
	// reported it once.
	rollout, err := r.deploy(ctx, fn, &st)
	switch {
	case errors.Is(err, runtime.ErrUnsupported):
		// Rather than serve otherwise than asked (an open network for
		// public egress), the function does not serve.
		if err := r.deployer.Undeploy(ctx, key); err != nil {
			return res, errors.Join(err, setStatus(ctx, fn, st))
		}
		st.Phase = functions.PhaseFailed
		st.Message = runtime.ErrUnsupported.Error() + ": " + runtime.PublicMessage(err, "the server log has the details")
		st.SetCondition(functions.Condition{Type: functions.ConditionReady, Status: functions.ConditionFalse,
			Reason: functions.ReasonUnsupported, Message: st.Message, ObservedGeneration: fn.Generation}, now)
		return res, setStatus(ctx, fn, st)
	case err != nil:
		return res, errors.Join(err, setStatus(ctx, fn, st))
	}
	// Ready only once the new version serves: a client that sees Ready
	// reaches it.
	if c := st.Condition(functions.ConditionBuildSucceeded); c != nil && c.Status == functions.ConditionTrue {
		if rollout.Ready {
			st.Phase, st.Message = functions.PhaseReady, ""
			st.SetCondition(functions.Condition{Type: functions.ConditionReady, Status: functions.ConditionTrue,
				Reason: functions.ReasonServing, ObservedGeneration: fn.Generation}, now)
		} else {
			st.Phase, st.Message = functions.PhaseBuilding, "deploying: "+rollout.Waiting
			st.SetCondition(functions.Condition{Type: functions.ConditionReady, Status: functions.ConditionUnknown,
				Reason: functions.ReasonDeploying, Message: st.Message, ObservedGeneration: fn.Generation}, now)
			res.RequeueAfter = rolloutPoll
		}
	}
	return res, setStatus(ctx, fn, st)
}

// Remove stops everything of a deleted function: its build and its
// instances. It is idempotent; Reconcile calls it for a function that is
// gone, and a driver that holds the function's deletion until its cleanup
// is done (the cluster mode's finalizer) calls it for one being deleted.
func (r *Reconciler) Remove(ctx context.Context, key functions.Key) error {
	if r.phases != nil {
		r.phases.Phase(key, "")
	}
	return errors.Join(r.builder.Cancel(ctx, key.Namespace, key.Name), r.deployer.Undeploy(ctx, key))
}

// deploy deploys st's artifact for fn, suspended or not.
func (r *Reconciler) deploy(ctx context.Context, fn *functions.Function, st *functions.Status) (runtime.Rollout, error) {
	t := Target(fn, st)
	var err error
	if t.Suspended, err = r.suspension.Suspended(ctx, fn.Key()); err != nil {
		return runtime.Rollout{}, err
	}
	rollout, err := r.deployer.Deploy(ctx, t)
	if err != nil {
		return rollout, fmt.Errorf("deploying %s: %w", fn.Key(), err)
	}
	return rollout, nil
}

// build advances the build state machine of fn's code in st, starting the
// build or reading its result, and reports whether a build is running and,
// for one not announced yet (fn's stored status names another build) that
// started less than announceAfter ago, how long st should stay unwritten.
func (r *Reconciler) build(ctx context.Context, fn *functions.Function, st *functions.Status, now time.Time) (building bool, quiet time.Duration, err error) {
	key, gen := fn.Key(), fn.Generation
	set := func(phase functions.Phase, status functions.ConditionStatus, reason, msg string) {
		st.Phase, st.Message = phase, msg
		st.SetCondition(functions.Condition{Type: functions.ConditionBuildSucceeded, Status: status, Reason: reason,
			Message: msg, ObservedGeneration: gen}, now)
		if status != functions.ConditionTrue {
			ready := status
			if reason == functions.ReasonNoCode {
				ready = functions.ConditionFalse
			}
			st.SetCondition(functions.Condition{Type: functions.ConditionReady, Status: ready, Reason: reason,
				Message: msg, ObservedGeneration: gen}, now)
		}
	}
	if fn.CodeSHA256 == "" {
		set(functions.PhasePending, functions.ConditionUnknown, functions.ReasonNoCode,
			"waiting for code: upload a zip to /v1/namespaces/"+fn.Namespace+"/functions/"+fn.Name+"/upload")
		return false, 0, nil
	}
	req := build.Request{Namespace: fn.Namespace, Function: fn.Name, Runtime: fn.Runtime, Handler: fn.Handler, CodeSHA256: fn.CodeSHA256}
	buildKey := req.Key()
	if c := st.Condition(functions.ConditionBuildSucceeded); c != nil && st.BuildKey == buildKey {
		switch {
		case c.Status == functions.ConditionTrue:
			// Built already: only settings that do not affect the artifact
			// may have changed.
			c.ObservedGeneration = gen
			return false, 0, nil
		case c.Status == functions.ConditionFalse && c.ObservedGeneration == gen:
			return false, 0, nil // failed, and unchanged since
		}
	}
	var notify func()
	if r.notify != nil {
		notify = func() { r.notify(key) }
	}
	p, err := r.builder.Build(ctx, req, notify)
	if err != nil {
		return false, 0, fmt.Errorf("building %s: %w", key, err)
	}
	st.BuildKey = buildKey
	switch {
	case !p.Done:
		set(functions.PhaseBuilding, functions.ConditionUnknown, functions.ReasonBuilding, "building code "+short(fn.CodeSHA256))
		if !p.Started.IsZero() && fn.Status.BuildKey != buildKey {
			quiet = announceAfter - time.Since(p.Started)
		}
		return true, max(quiet, 0), nil
	case p.Err != nil:
		reason, msg := functions.ReasonBuildFailed, failureMessage(p.Err)
		st.BuildLog = ""
		if be, ok := build.AsError(p.Err); ok {
			st.BuildLog = be.Log
		} else {
			reason = functions.ReasonBuildError
			r.log.ErrorContext(ctx, "build failed", "namespace", key.Namespace, "function", key.Name, "error", p.Err)
		}
		if st.Artifact != "" {
			msg += "; still serving code " + short(st.CodeSHA256)
		}
		set(functions.PhaseFailed, functions.ConditionFalse, reason, msg)
		return false, 0, nil
	}
	r.log.InfoContext(ctx, "built", "namespace", key.Namespace, "function", key.Name,
		"code_sha256", fn.CodeSHA256, "reused", p.Result.Reused)
	st.Artifact, st.ArtifactRuntime, st.ArtifactHandler = p.Result.Artifact, fn.Runtime, fn.Handler
	st.CodeSHA256 = fn.CodeSHA256
	if !p.Result.Reused {
		st.BuildLog = p.Result.Log
	}
	set(functions.PhaseBuilding, functions.ConditionTrue, functions.ReasonBuilt, "")
	return false, 0, nil
}

// Target is the deployable version of fn serving st's artifact: with the
// runtime and handler the artifact was built for, and the rest of fn's
// current spec. Its Version changes with everything that needs new
// instances (code, runtime, handler, env, memory, concurrency, egress) and
// not with what applies in place (instance counts, timeout).
func Target(fn *functions.Function, st *functions.Status) runtime.Target {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d\x00%d", st.ArtifactRuntime, st.Artifact, st.ArtifactHandler, fn.MemoryMB, fn.Concurrency)
	for _, k := range slices.Sorted(maps.Keys(fn.Env)) {
		fmt.Fprintf(h, "\x00%s=%s", k, fn.Env[k])
	}
	if fn.Egress != string(runtime.EgressAll) && fn.Egress != "" {
		// Only then: the versions of the other functions stay those of
		// before the setting existed.
		fmt.Fprintf(h, "\x00egress=%s", fn.Egress)
	}
	return runtime.Target{
		Namespace: fn.Namespace, Name: fn.Name, Version: hex.EncodeToString(h.Sum(nil))[:16],
		Runtime: st.ArtifactRuntime, Artifact: st.Artifact, Handler: st.ArtifactHandler, Env: fn.Env,
		Timeout: time.Duration(fn.TimeoutSeconds) * time.Second, MemoryMB: fn.MemoryMB,
		MinInstances: fn.MinInstances, MaxInstances: fn.MaxInstances, Concurrency: fn.Concurrency,
		Egress: runtime.Egress(fn.Egress),
	}
}

// failureMessage is the status message of a failed build: the builder's
// message for a code problem, a generic one for an infrastructure failure
// (whose details are logged, not shown).
func failureMessage(err error) string {
	if be, ok := build.AsError(err); ok {
		return "build failed: " + be.Msg
	}
	return "build failed because of an internal error; the server log has the details"
}

func (r *Reconciler) setStatus(ctx context.Context, fn *functions.Function, st functions.Status) error {
	if r.phases != nil {
		r.phases.Phase(fn.Key(), st.Phase)
	}
	if reflect.DeepEqual(st, fn.Status) {
		return nil
	}
	if st.Phase != fn.Status.Phase || st.Message != fn.Status.Message {
		st.UpdatedAt = time.Now().UTC()
	}
	err := r.store.UpdateStatus(ctx, fn.Key(), st)
	if errors.Is(err, functions.ErrNotFound) {
		return nil // deleted meanwhile
	}
	return err
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
