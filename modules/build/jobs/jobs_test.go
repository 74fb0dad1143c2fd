package jobs_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/jobs"
)

// runs is a RunFunc whose builds end when the test says so.
type runs struct {
	mu      sync.Mutex
	started map[string]chan struct{} // by code, closed to end the build
	ctxs    map[string]context.Context
	calls   map[string]int
	starts  chan string // each build's code, as it starts
}

func newRuns() *runs {
	return &runs{started: map[string]chan struct{}{}, ctxs: map[string]context.Context{}, calls: map[string]int{},
		starts: make(chan string, 16)}
}

func (r *runs) run(ctx context.Context, req build.Request) (build.Result, error) {
	release := make(chan struct{})
	r.mu.Lock()
	r.started[req.CodeSHA256], r.ctxs[req.CodeSHA256] = release, ctx
	r.calls[req.CodeSHA256]++
	r.mu.Unlock()
	r.starts <- req.CodeSHA256
	select {
	case <-release:
		return build.Result{Artifact: "artifact-" + req.CodeSHA256}, nil
	case <-ctx.Done():
		return build.Result{}, ctx.Err()
	}
}

// waitStarted returns the release and the context of code's build once it
// runs.
func (r *runs) waitStarted(t *testing.T, code string) (chan struct{}, context.Context) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case started := <-r.starts:
			if started != code {
				continue
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.started[code], r.ctxs[code]
		case <-timeout:
			t.Fatalf("the build of %s never started", code)
		}
	}
}

func newJobs(t *testing.T) (*jobs.Jobs, *runs) {
	t.Helper()
	r := newRuns()
	js := jobs.New(r.run, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := js.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.Stop(context.Background()) })
	return js, r
}

func req(code string) build.Request {
	return build.Request{Namespace: "ns", Function: "f", Runtime: "python3.11", Handler: "handler.handle", CodeSHA256: code}
}

func TestBuildReportsItsEndOnceThenForgetsIt(t *testing.T) {
	js, r := newJobs(t)
	notified := make(chan struct{})
	asked := time.Now()
	p, err := js.Build(context.Background(), req("a"), func() { close(notified) })
	if err != nil || p.Done || p.Started.Before(asked) || p.Started.After(time.Now()) {
		t.Fatalf("Build = %+v, %v; want a build in progress, started when asked", p, err)
	}
	started := p.Started
	release, _ := r.waitStarted(t, "a")
	if p, _ := js.Build(context.Background(), req("a"), func() { close(notified) }); p.Done || !p.Started.Equal(started) {
		t.Fatalf("Build of a running build = %+v; want it in progress, started at %v", p, started)
	}
	close(release)
	<-notified
	p, err = js.Build(context.Background(), req("a"), nil)
	if err != nil || !p.Done || p.Result.Artifact != "artifact-a" {
		t.Fatalf("Build after the end = %+v, %v; want artifact-a", p, err)
	}
	if r.calls["a"] != 1 {
		t.Errorf("%d runs while the build was asked about; want 1", r.calls["a"])
	}
	// Forgotten once reported: asking again builds again.
	if p, _ := js.Build(context.Background(), req("a"), nil); p.Done {
		t.Error("a reported build was not forgotten")
	}
}

func TestNewKeySupersedesTheRunningBuild(t *testing.T) {
	js, r := newJobs(t)
	oldNotified := make(chan struct{}, 1)
	if _, err := js.Build(context.Background(), req("old"), func() { oldNotified <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	_, oldCtx := r.waitStarted(t, "old")
	newNotified := make(chan struct{})
	if _, err := js.Build(context.Background(), req("new"), func() { close(newNotified) }); err != nil {
		t.Fatal(err)
	}
	<-oldCtx.Done()
	release, _ := r.waitStarted(t, "new")
	close(release)
	<-newNotified
	select {
	case <-oldNotified:
		t.Error("the superseded build notified")
	default:
	}
	if p, _ := js.Build(context.Background(), req("new"), nil); !p.Done || p.Result.Artifact != "artifact-new" {
		t.Errorf("Build = %+v; want the new build's result", p)
	}
}

func TestCancelAndStop(t *testing.T) {
	js, r := newJobs(t)
	if _, err := js.Build(context.Background(), req("a"), nil); err != nil {
		t.Fatal(err)
	}
	_, ctx := r.waitStarted(t, "a")
	if err := js.Cancel(context.Background(), "ns", "f"); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	if err := js.Cancel(context.Background(), "ns", "other"); err != nil {
		t.Errorf("cancelling a function without a build: %v", err)
	}
	if err := js.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Build(context.Background(), req("b"), nil); err == nil {
		t.Error("a stopped builder started a build")
	}
}
