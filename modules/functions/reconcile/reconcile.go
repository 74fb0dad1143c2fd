// Package reconcile is the one lifecycle of a function, shared by the
// embedded and the cluster mode: desired spec + observed status -> build if
// the code changed -> deploy the last good artifact (or undeploy) -> status.
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
	"slices"
	"strings"
	"time"

	"sless.kube5s.ru/sless/internal/controller"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/runtime"
)

// Reconciler reconciles functions.
type Reconciler struct {
	store        functions.Store
	builder      build.Builder
	executor     runtime.Executor
	suspension   functions.Suspension
	buildTimeout time.Duration
	log          *slog.Logger
}

// New returns a reconciler. buildTimeout bounds one build.
func New(store functions.Store, builder build.Builder, executor runtime.Executor, suspension functions.Suspension,
	buildTimeout time.Duration, log *slog.Logger) *Reconciler {
	return &Reconciler{store: store, builder: builder, executor: executor, suspension: suspension, buildTimeout: buildTimeout, log: log}
}

// Reconcile brings one function to its desired state. It is level-based and
// idempotent: the build key recorded in the status means that the same code
// is never built twice, and a Failed build is not retried until the function
// changes (a new upload or spec update raises the generation). The last good
// artifact is deployed to the executor on every pass, so that a restarted
// server serves what it served before.
func (r *Reconciler) Reconcile(ctx context.Context, key functions.Key) (controller.Result, error) {
	fn, err := r.store.Get(ctx, key)
	if errors.Is(err, functions.ErrNotFound) {
		return controller.Result{}, r.executor.Undeploy(ctx, key.Namespace, key.Name)
	}
	if err != nil {
		return controller.Result{}, err
	}
	st, err := r.build(ctx, fn)
	if err != nil {
		return controller.Result{}, err
	}
	// Deploy before publishing Ready: a client that sees Ready reaches the
	// new version.
	if st.Artifact != "" {
		t := Target(fn, st.Artifact)
		if t.Suspended, err = r.suspension.Suspended(ctx, key); err != nil {
			return controller.Result{}, err
		}
		switch err := r.executor.Deploy(ctx, t); {
		case errors.Is(err, runtime.ErrUnsupported):
			// Rather than serve otherwise than asked (an open network for
			// public egress), the function does not serve.
			if err := r.executor.Undeploy(ctx, key.Namespace, key.Name); err != nil {
				return controller.Result{}, err
			}
			st.Phase, st.Message = functions.PhaseFailed, runtime.ErrUnsupported.Error()+": "+runtime.PublicMessage(err, "the server log has the details")
		case err != nil:
			return controller.Result{}, fmt.Errorf("deploying %s: %w", key, err)
		case st.Phase == functions.PhaseFailed && strings.HasPrefix(st.Message, runtime.ErrUnsupported.Error()):
			// It failed to deploy, not to build: this server runs it now.
			st.Phase, st.Message = functions.PhaseReady, ""
		}
	} else if err := r.executor.Undeploy(ctx, key.Namespace, key.Name); err != nil {
		return controller.Result{}, err
	}
	return controller.Result{}, r.setStatus(ctx, fn, st)
}

// build returns the status after building the function's code if needed.
func (r *Reconciler) build(ctx context.Context, fn *functions.Function) (functions.Status, error) {
	key := fn.Key()
	st := fn.Status
	st.ObservedGeneration = fn.Generation

	if fn.CodeSHA256 == "" {
		st.Phase, st.Message = functions.PhasePending, "waiting for code: upload a zip to /v1/namespaces/"+fn.Namespace+"/functions/"+fn.Name+"/upload"
		return st, nil
	}
	req := build.Request{Namespace: fn.Namespace, Function: fn.Name, Runtime: fn.Runtime, Handler: fn.Handler, CodeSHA256: fn.CodeSHA256}
	buildKey := req.Key()
	if fn.Status.BuildKey == buildKey && (fn.Status.Phase == functions.PhaseReady ||
		fn.Status.Phase == functions.PhaseFailed && fn.Status.ObservedGeneration == fn.Generation) {
		// Built already, or failed and unchanged since: only settings that
		// do not affect the artifact may have changed.
		return st, nil
	}

	st.Phase, st.Message, st.BuildKey = functions.PhaseBuilding, "building code "+short(fn.CodeSHA256), buildKey
	if err := r.setStatus(ctx, fn, st); err != nil {
		return st, err
	}
	fn.Status = st
	start := time.Now()
	buildCtx, cancel := context.WithTimeoutCause(ctx, r.buildTimeout, fmt.Errorf("the build took longer than %s", r.buildTimeout))
	res, err := r.builder.Build(buildCtx, req)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			// The server is stopping: the function stays Building and the
			// build runs again after the next start.
			return st, ctx.Err()
		}
		st.Phase, st.Message, st.BuildLog = functions.PhaseFailed, failureMessage(err), ""
		if be, ok := build.AsError(err); ok {
			st.BuildLog = be.Log
		} else {
			r.log.ErrorContext(ctx, "build failed", "namespace", key.Namespace, "function", key.Name, "error", err)
		}
		if st.Artifact != "" {
			st.Message += "; still serving code " + short(st.CodeSHA256)
		}
		return st, nil
	}
	r.log.InfoContext(ctx, "built", "namespace", key.Namespace, "function", key.Name,
		"code_sha256", fn.CodeSHA256, "reused", res.Reused, "duration", time.Since(start))
	st.Phase, st.Message = functions.PhaseReady, ""
	st.Artifact, st.CodeSHA256 = res.Artifact, fn.CodeSHA256
	if !res.Reused {
		st.BuildLog = res.Log
	}
	return st, nil
}

// Target is the deployable version of fn running artifact. Its Version
// changes with everything that needs new instances (code, handler, env,
// memory, concurrency, egress) and not with what applies in place (instance counts,
// timeout).
func Target(fn *functions.Function, artifact string) runtime.Target {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d\x00%d", fn.Runtime, artifact, fn.Handler, fn.MemoryMB, fn.Concurrency)
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
		Runtime: fn.Runtime, Artifact: artifact, Handler: fn.Handler, Env: fn.Env,
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
	if st == fn.Status {
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
