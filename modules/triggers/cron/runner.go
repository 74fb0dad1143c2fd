package cron

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/triggers"
)

// errStopped is returned by Apply after Stop.
var errStopped = errors.New("the cron runner is stopped")

// errStopping cancels the runs that outlive Stop's deadline; failed runs say
// it.
var errStopping = errors.New("cancelled: the server is stopping")

// Runner runs cron triggers: one goroutine per trigger waits for the next
// run of its schedule and starts each run in a goroutine of its own.
type Runner struct {
	inv   invoke.Invoker
	warm  triggers.Warmer
	rep   triggers.Reporter
	log   *slog.Logger
	clock Clock

	mu      sync.Mutex
	entries map[triggers.Key]*entry
	// runs are the runs in flight of every trigger, including removed ones,
	// for Stop to cancel.
	runs    map[*run]struct{}
	stopped bool

	// loops counts the trigger goroutines, work the warms and runs they
	// started; work is added to only under mu by a live loop, so never after
	// Stop began to wait.
	loops sync.WaitGroup
	work  sync.WaitGroup
}

var _ triggers.Runner = (*Runner)(nil)

// Option configures a Runner.
type Option func(*Runner)

// WithClock makes the Runner read the time and wait with c instead of the
// system clock.
func WithClock(c Clock) Option { return func(r *Runner) { r.clock = c } }

// New returns a Runner that invokes functions with inv and starts their
// instances ahead of runs with warm (for PrewarmSeconds), and reports to rep.
func New(inv invoke.Invoker, warm triggers.Warmer, rep triggers.Reporter, log *slog.Logger, opts ...Option) *Runner {
	r := &Runner{
		inv:     inv,
		warm:    warm,
		rep:     rep,
		log:     log,
		clock:   systemClock{},
		entries: make(map[triggers.Key]*entry),
		runs:    make(map[*run]struct{}),
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// entry is an applied trigger.
type entry struct {
	cfg config
	// stop ends the loop of cfg.
	stop context.CancelFunc
	// active are the trigger's runs in flight, which outlive a restart of
	// the loop so that the concurrency policy still sees them; guarded by
	// Runner.mu.
	active map[*run]struct{}
}

// config is what makes a trigger run differently: Apply restarts the loop
// when it changes.
type config struct {
	function, schedule, timezone, payload, policy string
	prewarm                                       int
}

// run is one invocation in flight.
type run struct {
	// at is the scheduled time.
	at     time.Time
	cancel context.CancelCauseFunc
}

// Apply starts the trigger's loop, restarts it when the spec changed, and
// removes the trigger when it is disabled. In-flight runs continue across a
// restart. A spec that cannot run is an error and stops the trigger.
func (r *Runner) Apply(ctx context.Context, t *triggers.Trigger) error {
	key := t.Key()
	if t.Type != triggers.TypeCron {
		return fmt.Errorf("applying trigger %s: type %q is not %q", key, t.Type, triggers.TypeCron)
	}
	if !t.IsEnabled() {
		r.Remove(key)
		return nil
	}
	cfg, sched, err := parseConfig(&t.Spec)
	if err != nil {
		// Running the previous spec would contradict the trigger.
		r.Remove(key)
		return fmt.Errorf("applying cron trigger %s: %w", key, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return fmt.Errorf("applying cron trigger %s: %w", key, errStopped)
	}
	e := r.entries[key]
	switch {
	case e == nil:
		e = &entry{active: make(map[*run]struct{})}
		r.entries[key] = e
	case e.cfg == cfg:
		return nil
	default:
		e.stop()
	}
	e.cfg = cfg
	// The loop outlives the request that applied it; Remove and Stop end it.
	loopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	e.stop = stop
	l := &loop{r: r, key: key, cfg: cfg, sched: sched, entry: e}
	r.loops.Go(func() { l.run(loopCtx) })
	r.log.Debug("cron trigger scheduled", "trigger", key, "schedule", cfg.schedule, "timezone", cfg.timezone)
	return nil
}

// parseConfig checks the cron fields of spec and returns what the loop runs.
func parseConfig(spec *triggers.Spec) (config, Schedule, error) {
	sched, err := ParseSchedule(spec.Schedule, spec.Timezone)
	if err != nil {
		return config{}, Schedule{}, err
	}
	policy := spec.ConcurrencyPolicy
	switch policy {
	case "":
		policy = triggers.PolicyAllow
	case triggers.PolicyAllow, triggers.PolicyForbid, triggers.PolicyReplace:
	default:
		return config{}, Schedule{}, fmt.Errorf("unknown concurrency policy %q", policy)
	}
	if spec.PrewarmSeconds < 0 {
		return config{}, Schedule{}, fmt.Errorf("negative prewarm_seconds %d", spec.PrewarmSeconds)
	}
	return config{
		function: spec.Function,
		schedule: spec.Schedule,
		timezone: spec.Timezone,
		payload:  string(spec.Payload),
		policy:   policy,
		prewarm:  spec.PrewarmSeconds,
	}, sched, nil
}

// Remove stops the trigger's loop; its runs in flight finish in the
// background.
func (r *Runner) Remove(key triggers.Key) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[key]; e != nil {
		e.stop()
		delete(r.entries, key)
	}
}

// Stop stops every trigger and waits for the runs in flight until ctx is
// done; then it cancels them and returns ctx's error without waiting more.
func (r *Runner) Stop(ctx context.Context) error {
	r.mu.Lock()
	r.stopped = true
	for _, e := range r.entries {
		e.stop()
	}
	clear(r.entries)
	r.mu.Unlock()

	done := make(chan struct{})
	go func() {
		r.loops.Wait()
		r.work.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	r.mu.Lock()
	for rn := range r.runs {
		rn.cancel(errStopping)
	}
	r.mu.Unlock()
	return fmt.Errorf("stopping cron triggers: runs in flight cancelled: %w", ctx.Err())
}

// loop is the goroutine of one trigger under one config.
type loop struct {
	r     *Runner
	key   triggers.Key
	cfg   config
	sched Schedule
	entry *entry
}

// run fires the trigger at each scheduled time until ctx ends. The next run
// is computed from now, never from a missed tick, so that a server that was
// down or a loop that woke late fires once rather than a burst.
func (l *loop) run(ctx context.Context) {
	now := l.r.clock.Now()
	for {
		next := l.sched.Next(now)
		if next.IsZero() {
			l.reportLive(ctx, triggers.Event{Kind: triggers.EventError, At: now, Message: "the schedule matches no date in the next five years"})
			return
		}
		l.reportLive(ctx, triggers.Event{Kind: triggers.EventScheduled, At: now, Next: next})
		if !l.prewarm(ctx, next) || !l.sleepUntil(ctx, next) || !l.fire(ctx, next) {
			return
		}
		now = l.r.clock.Now()
		if now.Before(next) {
			// The wall clock went back; do not run the same tick twice.
			now = next
		}
	}
}

// reportLive reports ev unless the loop was stopped, so that a replaced loop
// cannot overwrite its successor's next run.
func (l *loop) reportLive(ctx context.Context, ev triggers.Event) {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	if ctx.Err() == nil {
		l.r.rep.Report(l.key, ev)
	}
}

// sleepUntil waits until the clock reads t; it returns false when ctx ends
// first.
func (l *loop) sleepUntil(ctx context.Context, t time.Time) bool {
	// A timer measures elapsed time, the schedule wall time: check the wall
	// clock again when it fires.
	for d := t.Sub(l.r.clock.Now()); d > 0; d = t.Sub(l.r.clock.Now()) {
		timer := l.r.clock.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-timer.C():
		}
	}
	return true
}

// prewarmGrace is how long after its time a prewarmed instance is kept for
// a run: the run reaches the executor a moment after the time, later on a
// loaded machine.
const prewarmGrace = 5 * time.Second

// prewarm starts an instance PrewarmSeconds before next, at once when that
// is past already; it returns false when ctx ended first.
func (l *loop) prewarm(ctx context.Context, next time.Time) bool {
	if l.cfg.prewarm == 0 {
		return true
	}
	if !l.sleepUntil(ctx, next.Add(-time.Duration(l.cfg.prewarm)*time.Second)) {
		return false
	}
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	if ctx.Err() != nil {
		return false
	}
	// In the background: a cold start must not delay the run.
	l.r.work.Go(func() {
		if err := l.r.warm.Warm(ctx, triggers.Key{Namespace: l.key.Namespace, Name: l.cfg.function}, next.Add(prewarmGrace)); err != nil {
			// The run itself reports what matters.
			l.r.log.Debug("cron trigger: prewarm failed", "trigger", l.key, "error", err)
		}
	})
	return true
}

// fire starts the run scheduled at at, or skips it under the Forbid policy;
// it returns false when the loop was stopped meanwhile.
func (l *loop) fire(ctx context.Context, at time.Time) bool {
	busy, ok := l.start(ctx, at)
	if busy != nil {
		l.r.rep.Report(l.key, triggers.Event{
			Kind:    triggers.EventSkipped,
			At:      l.r.clock.Now(),
			Message: fmt.Sprintf("skipped: the run of %s is still running", busy.at.Format(time.RFC3339)),
		})
	}
	return ok
}

// start starts the run scheduled at at as the concurrency policy says. It
// returns the run in flight that holds it back under Forbid, and false when
// the loop was stopped.
func (l *loop) start(ctx context.Context, at time.Time) (busy *run, ok bool) {
	r := l.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if ctx.Err() != nil {
		return nil, false
	}
	switch l.cfg.policy {
	case triggers.PolicyForbid:
		if busy := oldest(l.entry.active); busy != nil {
			return busy, true
		}
	case triggers.PolicyReplace:
		for old := range l.entry.active {
			old.cancel(fmt.Errorf("cancelled: replaced by the run of %s", at.Format(time.RFC3339)))
		}
	}
	rn := &run{at: at}
	// A run has no deadline of its own (the function's timeout applies) and
	// outlives its loop; Replace and Stop cancel it.
	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	rn.cancel = cancel
	l.entry.active[rn] = struct{}{}
	r.runs[rn] = struct{}{}
	r.work.Go(func() { l.invoke(runCtx, rn) })
	return nil, true
}

func oldest(runs map[*run]struct{}) *run {
	var first *run
	for rn := range runs {
		if first == nil || rn.at.Before(first.at) {
			first = rn
		}
	}
	return first
}

// invoke calls the function once and reports the outcome.
func (l *loop) invoke(ctx context.Context, rn *run) {
	defer l.finish(rn)
	r := l.r
	r.rep.Report(l.key, triggers.Event{Kind: triggers.EventFired, At: r.clock.Now()})
	body := []byte(l.cfg.payload)
	if len(body) == 0 {
		body = []byte("null")
	}
	resp, err := r.inv.Invoke(ctx, invoke.Request{
		Namespace:   l.key.Namespace,
		Function:    l.cfg.function,
		Method:      http.MethodPost,
		Header:      http.Header{"Content-Type": {"application/json"}},
		Body:        body,
		TriggerKind: invoke.KindCron,
		TriggerName: l.key.Name,
		TriggerMeta: map[string]any{"scheduled_at": rn.at.Format(time.RFC3339)},
	})
	ev := triggers.Event{Kind: triggers.EventSucceeded, At: r.clock.Now()}
	if msg := failure(ctx, resp, err); msg != "" {
		ev.Kind, ev.Message = triggers.EventFailed, msg
		id := ""
		if resp != nil {
			id = resp.InvocationID
		}
		r.log.Debug("cron run failed", "namespace", l.key.Namespace, "trigger", l.key.Name, "function", l.cfg.function,
			"invocation_id", id, "scheduled_at", rn.at, "error", msg)
	}
	r.rep.Report(l.key, ev)
}

// failure says why a run failed, or "" when it succeeded.
func failure(ctx context.Context, resp *invoke.Response, err error) string {
	var msg string
	switch {
	case err != nil:
		msg = err.Error()
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		msg = resp.Error
		if msg == "" {
			msg = fmt.Sprintf("the function answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
		}
	default:
		return ""
	}
	// "context canceled" would hide who cancelled the run.
	if cause := context.Cause(ctx); cause != nil {
		return cause.Error()
	}
	return msg
}

func (l *loop) finish(rn *run) {
	rn.cancel(nil)
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	delete(l.entry.active, rn)
	delete(l.r.runs, rn)
}
