package rabbitmq

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/triggers"
)

// waitTimeout bounds every wait of the tests; things happen in milliseconds,
// and the margin is for loaded CI machines (rabbitmqctl alone takes about a
// second a command).
const waitTimeout = 30 * time.Second

// answer is a fake function's answer to its n-th invocation (from 1).
type answer func(ctx context.Context, n int, req invoke.Request) (*invoke.Response, error)

func status(code int, msg string) (*invoke.Response, error) {
	return &invoke.Response{StatusCode: code, Error: msg}, nil
}

func succeed(context.Context, int, invoke.Request) (*invoke.Response, error) {
	return status(http.StatusOK, "")
}

func alwaysFail(context.Context, int, invoke.Request) (*invoke.Response, error) {
	return status(http.StatusInternalServerError, "boom")
}

// failTimes fails the first k invocations and succeeds after.
func failTimes(k int) answer {
	return func(ctx context.Context, n int, req invoke.Request) (*invoke.Response, error) {
		if n <= k {
			return alwaysFail(ctx, n, req)
		}
		return succeed(ctx, n, req)
	}
}

// blockUntil succeeds once release is closed; it fails when ctx ends first.
func blockUntil(release <-chan struct{}) answer {
	return func(ctx context.Context, n int, req invoke.Request) (*invoke.Response, error) {
		select {
		case <-release:
			return succeed(ctx, n, req)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// fakeInvoker answers with its answer, records the requests and counts the
// invocations in flight.
type fakeInvoker struct {
	answer answer

	mu                    sync.Mutex
	reqs                  []invoke.Request
	inflight, maxInflight int
}

func (f *fakeInvoker) Invoke(ctx context.Context, req invoke.Request) (*invoke.Response, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	n := len(f.reqs)
	f.inflight++
	f.maxInflight = max(f.maxInflight, f.inflight)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight--
		f.mu.Unlock()
	}()
	return f.answer(ctx, n, req)
}

func (f *fakeInvoker) requests() []invoke.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

// load returns how many invocations are in flight and the most there were.
func (f *fakeInvoker) load() (inflight, most int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inflight, f.maxInflight
}

// fakeReporter records events.
type fakeReporter struct {
	mu     sync.Mutex
	events []triggers.Event
	// reported, when a wait made it, is closed at the next Report.
	reported chan struct{}
}

func (r *fakeReporter) Report(_ triggers.Key, ev triggers.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
	if r.reported != nil {
		close(r.reported)
		r.reported = nil
	}
}

func (r *fakeReporter) all() []triggers.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// count returns how many events of kind have a message containing substr.
func (r *fakeReporter) count(kind, substr string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.countLocked(kind, substr)
}

func (r *fakeReporter) countLocked(kind, substr string) int {
	n := 0
	for _, ev := range r.events {
		if ev.Kind == kind && strings.Contains(ev.Message, substr) {
			n++
		}
	}
	return n
}

// await waits until at least n events of kind with a message containing
// substr were reported, or until timeout; it returns their count.
func (r *fakeReporter) await(kind, substr string, n int, timeout time.Duration) int {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		r.mu.Lock()
		got := r.countLocked(kind, substr)
		if got >= n {
			r.mu.Unlock()
			return got
		}
		if r.reported == nil {
			r.reported = make(chan struct{})
		}
		reported := r.reported
		r.mu.Unlock()
		select {
		case <-reported:
		case <-timer.C:
			return got
		}
	}
}

// harness is a Runner with fakes on a vhost or a broker of its own.
type harness struct {
	t *testing.T
	// vhost is the test's on the shared broker; none on a node of the
	// test's own.
	vhost testenv.RabbitMQVhost
	// url is the broker's, and counts lists its queues: the vhost's, or
	// those of a node of the test's own.
	url    string
	counts func(queue string) (ready, unacked int, err error)
	inv    *fakeInvoker
	rep    *fakeReporter
	logs   *testenv.SyncBuffer
	r      *Runner
	// password is the password of the triggers' URLs, to be found in no
	// event and no log line.
	password string
}

// newHarness runs t in parallel with the other tests (each on its vhost)
// and stops the runner when t ends, checking that no event and no log line
// has the password of the vhost's URL. The runner retries after a few
// milliseconds, unless opts say otherwise.
func newHarness(t *testing.T, a answer, opts ...Option) *harness {
	t.Parallel()
	vhost := testenv.RabbitMQ(t)
	h := newHarnessOn(t, vhost.URL, vhost.QueueCounts, a, opts...)
	h.vhost = vhost
	return h
}

// newNodeHarness is newHarness on a RabbitMQ node of the test's own, which
// it may restart.
func newNodeHarness(t *testing.T, a answer, opts ...Option) (*harness, *testenv.RabbitMQNode) {
	t.Parallel()
	node := testenv.StartRabbitMQNode(t)
	return newHarnessOn(t, node.URL, node.QueueCounts, a, opts...), node
}

// newHarnessOn is newHarness on the broker of url, whose queues counts
// lists.
func newHarnessOn(t *testing.T, url string, counts func(string) (int, int, error), a answer, opts ...Option) *harness {
	h := &harness{t: t, url: url, counts: counts, inv: &fakeInvoker{answer: a}, rep: &fakeReporter{}, logs: &testenv.SyncBuffer{}, password: testenvPassword}
	h.r = h.newRunner(opts...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("events: %+v\nrunner log:\n%s", h.rep.all(), h.logs)
		}
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := h.r.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		h.checkNoSecret()
	})
	return h
}

// newRunner returns a runner with the harness's fakes and log, and with
// short delays unless opts set others.
func (h *harness) newRunner(opts ...Option) *Runner {
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	defaults := []Option{
		WithRetryBackoff(time.Millisecond, 10*time.Millisecond),
		WithReconnectBackoff(10*time.Millisecond, 100*time.Millisecond),
	}
	return New(h.inv, h.rep, log, append(defaults, opts...)...)
}

// restart stops the runner, as a stopping server does, and starts a new
// one with opts and tr.
func (h *harness) restart(tr *triggers.Trigger, opts ...Option) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := h.r.Stop(ctx); err != nil {
		h.t.Fatalf("Stop: %v", err)
	}
	h.start(tr, opts...)
}

// start replaces the stopped runner by a new one with opts, which knows
// nothing of what the first did, and applies tr to it.
func (h *harness) start(tr *triggers.Trigger, opts ...Option) {
	h.t.Helper()
	h.r = h.newRunner(opts...)
	h.applyReady(tr)
}

// testenvPassword is the password in the URLs of testenv.RabbitMQ; the
// user is guest too.
const testenvPassword = "guest"

// checkNoSecret fails the test if an event or a log line has the
// password. The log shows URLs with their user, which may equal the
// password, so there it looks for the password after the user.
func (h *harness) checkNoSecret() {
	h.t.Helper()
	for _, ev := range h.rep.all() {
		if strings.Contains(ev.Message, h.password) {
			h.t.Errorf("event %s has the password: %q", ev.Kind, ev.Message)
		}
	}
	logs := h.logs.String()
	if strings.Contains(logs, ":"+h.password+"@") || h.password != testenvPassword && strings.Contains(logs, h.password) {
		h.t.Errorf("the log has the password:\n%s", logs)
	}
}

// trigger returns the trigger shop/orders consuming queue "jobs", changed
// by edit.
func (h *harness) trigger(edit func(*triggers.RabbitMQSpec)) *triggers.Trigger {
	tr := &triggers.Trigger{Namespace: "shop", Name: "orders", Spec: triggers.Spec{
		Function: "handle", Type: triggers.TypeRabbitMQ,
		RabbitMQSpec: triggers.RabbitMQSpec{URL: h.url, Queue: "jobs"},
	}}
	if edit != nil {
		edit(&tr.RabbitMQSpec)
	}
	return tr
}

func (h *harness) apply(tr *triggers.Trigger) {
	h.t.Helper()
	if err := h.r.Apply(h.t.Context(), tr); err != nil {
		h.t.Fatalf("Apply: %v", err)
	}
}

// applyReady applies tr and waits until it consumes (a new EventHealthy).
func (h *harness) applyReady(tr *triggers.Trigger) {
	h.t.Helper()
	healthy := h.rep.count(triggers.EventHealthy, "")
	h.apply(tr)
	h.waitEvents(triggers.EventHealthy, "", healthy+1)
}

// waitEvents waits until n events of kind with substr in their message
// were reported.
func (h *harness) waitEvents(kind, substr string, n int) {
	h.t.Helper()
	if got := h.rep.await(kind, substr, n, waitTimeout); got < n {
		h.t.Fatalf("after %v: %d %s events with %q; want %d", waitTimeout, got, kind, substr, n)
	}
}

// waitCounts waits until the queue has ready messages waiting and unacked
// ones delivered but not acknowledged.
func (h *harness) waitCounts(queue string, ready, unacked int) {
	h.t.Helper()
	eventually(h.t, func() error {
		r, u, err := h.counts(queue)
		if err == nil && (r != ready || u != unacked) {
			err = fmt.Errorf("queue %s has %d ready and %d unacked messages; want %d and %d", queue, r, u, ready, unacked)
		}
		return err
	})
}

// eventually polls cond until it returns nil, failing t with its last error
// after waitTimeout.
func eventually(t *testing.T, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", waitTimeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// channel runs f on a channel of a new connection of the test's own, since
// a forced close of the vhost's connections would break a long-lived one.
func (h *harness) channel(f func(ch *amqp.Channel) error) {
	h.t.Helper()
	conn, err := amqp.Dial(h.url)
	if err != nil {
		h.t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		h.t.Fatalf("open a channel: %v", err)
	}
	if err := f(ch); err != nil {
		h.t.Fatal(err)
	}
}

// publish publishes msg and waits for the broker's confirmation.
func (h *harness) publish(exchange, key string, msg amqp.Publishing) {
	h.t.Helper()
	h.channel(func(ch *amqp.Channel) error {
		if err := ch.Confirm(false); err != nil {
			return err
		}
		confirm, err := ch.PublishWithDeferredConfirm(exchange, key, false, false, msg)
		if err != nil {
			return err
		}
		if !confirm.Wait() {
			h.t.Fatalf("publish to exchange %q with key %q: not confirmed", exchange, key)
		}
		return nil
	})
}

// inspect returns the queue as a passive declare shows it: ready messages
// and consumers.
func (h *harness) inspect(queue string) amqp.Queue {
	h.t.Helper()
	var q amqp.Queue
	h.channel(func(ch *amqp.Channel) (err error) {
		q, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return err
	})
	return q
}

// get takes one message from the queue, failing the test when it is empty.
func (h *harness) get(queue string) amqp.Delivery {
	h.t.Helper()
	var d amqp.Delivery
	h.channel(func(ch *amqp.Channel) error {
		var ok bool
		var err error
		if d, ok, err = ch.Get(queue, true); err == nil && !ok {
			h.t.Fatalf("queue %s is empty", queue)
		}
		return err
	})
	return d
}
