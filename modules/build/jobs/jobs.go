// Package jobs is the bookkeeping every builder shares: it runs one build per
// function in the background, cancels a superseded one, and keeps the result
// until the function asks for it, which is what the build.Builder contract
// asks of Build and Cancel. A builder supplies only the build itself.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"sless.kube5s.ru/sless/modules/build"
)

// RunFunc builds req's artifact, or finds it built. ctx ends when the build
// is cancelled or the Jobs stop.
type RunFunc func(ctx context.Context, req build.Request) (build.Result, error)

// Jobs implements build.Builder over a RunFunc: each build runs on a
// goroutine of its own, and its result waits in memory until its function
// asks for it. It is stopped until Start.
type Jobs struct {
	run RunFunc
	log *slog.Logger
	// observer, when set, is told about every build's end.
	observer build.Observer

	mu sync.Mutex
	// jobs is the build of each function ("namespace/name").
	jobs map[string]*job
	// ctx is the parent of every build's context, cancelled by Stop.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// job is one function's build.
type job struct {
	key     string // the request's Key
	started time.Time
	cancel  context.CancelFunc
	// done is closed when res and err are set.
	done   chan struct{}
	res    build.Result
	err    error
	notify func() // guarded by Jobs.mu
}

// New returns stopped Jobs that build with run and log each build's end at
// debug level.
func New(run RunFunc, log *slog.Logger) *Jobs {
	return &Jobs{run: run, log: log, jobs: map[string]*job{}}
}

// SetObserver makes o hear of every build's end and of every function
// whose builds are cancelled for good (Cancel). Call it before Start.
func (js *Jobs) SetObserver(o build.Observer) { js.observer = o }

// Start lets builds run; they outlive ctx, Stop cancels them.
func (js *Jobs) Start(ctx context.Context) error {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.ctx, js.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return nil
}

// Stop cancels every build, forgetting it (a function that was building
// builds again after the next start), and waits for them until ctx ends.
func (js *Jobs) Stop(ctx context.Context) error {
	js.mu.Lock()
	if js.cancel != nil {
		js.cancel()
	}
	js.jobs = map[string]*job{}
	js.mu.Unlock()
	done := make(chan struct{})
	go func() { js.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping the builds: %w", ctx.Err())
	}
}

var _ build.Builder = (*Jobs)(nil)

// Build implements build.Builder.
func (js *Jobs) Build(_ context.Context, req build.Request, notify func()) (build.Progress, error) {
	fk, key := req.Namespace+"/"+req.Function, req.Key()
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.ctx == nil || js.ctx.Err() != nil {
		return build.Progress{}, errors.New("the builder is not running")
	}
	j := js.jobs[fk]
	if j != nil && j.key != key {
		j.cancel()
		j = nil
	}
	if j == nil {
		j = &job{key: key, started: time.Now(), done: make(chan struct{})}
		var ctx context.Context
		ctx, j.cancel = context.WithCancel(js.ctx)
		js.jobs[fk] = j
		js.wg.Go(func() { js.runJob(ctx, fk, j, req) })
	}
	j.notify = notify
	select {
	case <-j.done:
		delete(js.jobs, fk)
		return build.Progress{Done: true, Result: j.res, Err: j.err}, nil
	default:
		return build.Progress{Started: j.started}, nil
	}
}

// Cancel implements build.Builder.
func (js *Jobs) Cancel(_ context.Context, namespace, function string) error {
	fk := namespace + "/" + function
	js.mu.Lock()
	defer js.mu.Unlock()
	if j, ok := js.jobs[fk]; ok {
		j.cancel()
		delete(js.jobs, fk)
	}
	if js.observer != nil {
		js.observer.Forget(namespace, function)
	}
	return nil
}

// runJob builds j and notifies its function, unless the build was cancelled
// meanwhile (it is then no longer the function's job).
func (js *Jobs) runJob(ctx context.Context, fk string, j *job, req build.Request) {
	defer j.cancel()
	start := j.started
	res, err := js.run(ctx, req)
	took := time.Since(start)
	js.log.DebugContext(ctx, "build ended", "namespace", req.Namespace, "function", req.Function,
		"code_sha256", req.CodeSHA256, "reused", res.Reused, "duration", took, "error", err)
	if js.observer != nil {
		js.observer.BuildEnded(req, start, took, res, err)
	}
	js.mu.Lock()
	j.res, j.err = res, err
	close(j.done)
	notify := j.notify
	current := js.jobs[fk] == j
	js.mu.Unlock()
	if current && notify != nil {
		notify()
	}
}
