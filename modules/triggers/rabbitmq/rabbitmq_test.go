package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"

	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/triggers"
)

func TestDelivers(t *testing.T) {
	h := newHarness(t, succeed)
	h.applyReady(h.trigger(nil)) // the queue does not exist: the runner declares it
	stamp := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	h.publish("", "jobs", amqp.Publishing{
		ContentType: "text/plain", MessageId: "m-1", CorrelationId: "c-1", Timestamp: stamp,
		Headers: amqp.Table{"k": "v", "n": int32(7), "nested": amqp.Table{"b": true}, "list": []any{"a", int64(2)}},
		Body:    []byte("hello"),
	})
	h.waitEvents(triggers.EventSucceeded, "status 200", 1)
	h.waitCounts("jobs", 0, 0)

	want := []invoke.Request{{
		Namespace: "shop", Function: "handle", Method: http.MethodPost,
		Header:      http.Header{"Content-Type": {"text/plain"}},
		Body:        []byte("hello"),
		TriggerKind: invoke.KindRabbitMQ, TriggerName: "orders",
		TriggerMeta: map[string]any{"message": map[string]any{
			"message_id": "m-1", "correlation_id": "c-1", "routing_key": "jobs", "exchange": "",
			"queue": "jobs", "redelivered": false, "content_type": "text/plain",
			"timestamp": "2024-05-06T07:08:09Z",
			"headers": map[string]any{
				"k": "v", "n": int32(7), "nested": map[string]any{"b": true}, "list": []any{"a", int64(2)},
			},
			"attempt": 1,
		}},
	}}
	if diff := cmp.Diff(want, h.inv.requests()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}

	// Without a content type the body is taken for JSON.
	h.publish("", "jobs", amqp.Publishing{Body: []byte(`{"a":1}`)})
	h.waitEvents(triggers.EventSucceeded, "", 2)
	reqs := h.inv.requests()
	if got := reqs[len(reqs)-1]; got.Header.Get("Content-Type") != "application/json" || got.TriggerMeta["message"].(map[string]any)["timestamp"] != nil {
		t.Errorf("request of a bare message: header %v, metadata %v; want application/json and a null timestamp", got.Header, got.TriggerMeta)
	}
	if n := h.rep.count(triggers.EventFired, ""); n != 2 {
		t.Errorf("%d fired events; want 2", n)
	}
}

func TestExchangeBinding(t *testing.T) {
	h := newHarness(t, succeed)
	h.channel(func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare("events", amqp.ExchangeTopic, true, false, false, false, nil)
	})
	h.applyReady(h.trigger(func(s *triggers.RabbitMQSpec) { s.Exchange, s.RoutingKey = "events", "order.*" }))
	h.publish("events", "invoice.created", amqp.Publishing{Body: []byte("not for us")})
	h.publish("events", "order.created", amqp.Publishing{Body: []byte("for us")})
	h.waitEvents(triggers.EventSucceeded, "", 1)
	h.waitCounts("jobs", 0, 0)
	reqs := h.inv.requests()
	if len(reqs) != 1 || string(reqs[0].Body) != "for us" {
		t.Fatalf("requests %+v; want the one routed message", reqs)
	}
	meta := reqs[0].TriggerMeta["message"].(map[string]any)
	if meta["exchange"] != "events" || meta["routing_key"] != "order.created" || meta["queue"] != "jobs" {
		t.Errorf("metadata %v; want exchange events, routing key order.created, queue jobs", meta)
	}
}

func TestMissingExchange(t *testing.T) {
	h := newHarness(t, succeed)
	h.apply(h.trigger(func(s *triggers.RabbitMQSpec) { s.Exchange, s.RoutingKey = "nope", "x" }))
	// Reported, and retried.
	h.waitEvents(triggers.EventError, `exchange "nope" does not exist`, 2)
	if n := h.rep.count(triggers.EventHealthy, ""); n != 0 {
		t.Errorf("%d healthy events for a trigger that cannot consume", n)
	}
}

func TestRetryThenSucceed(t *testing.T) {
	h := newHarness(t, failTimes(2))
	h.applyReady(h.trigger(func(s *triggers.RabbitMQSpec) {
		s.MaxRetries = ptr(3)
		s.DeadLetterQueue = "dead"
	}))
	h.publish("", "jobs", amqp.Publishing{Body: []byte("x")})
	h.waitEvents(triggers.EventSucceeded, "", 1)
	h.waitCounts("jobs", 0, 0)

	var attempts []any
	for _, r := range h.inv.requests() {
		attempts = append(attempts, r.TriggerMeta["message"].(map[string]any)["attempt"])
	}
	if diff := cmp.Diff([]any{1, 2, 3}, attempts); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
	for kind, want := range map[string]int{
		triggers.EventFired: 3, triggers.EventFailed: 2, triggers.EventSucceeded: 1, triggers.EventDeadLettered: 0,
	} {
		if got := h.rep.count(kind, ""); got != want {
			t.Errorf("%d %s events; want %d", got, kind, want)
		}
	}
	if n := h.rep.count(triggers.EventFailed, "attempt 2 of 4: status 500: boom"); n != 1 {
		t.Errorf("no failed event saying the attempt and the status: %+v", h.rep.all())
	}
	if q := h.inspect("dead"); q.Messages != 0 {
		t.Errorf("dead-letter queue has %d messages; want none", q.Messages)
	}
}

func TestDeadLetterQueue(t *testing.T) {
	h := newHarness(t, alwaysFail)
	h.applyReady(h.trigger(func(s *triggers.RabbitMQSpec) {
		s.MaxRetries = ptr(2)
		s.DeadLetterQueue = "dead" // missing: the runner declares it
	}))
	h.publish("", "jobs", amqp.Publishing{MessageId: "m-1", ContentType: "text/plain", Headers: amqp.Table{"k": "v"}, Body: []byte("x")})
	h.waitEvents(triggers.EventDeadLettered, `after 3 attempts (status 500: boom): published to queue "dead"`, 1)
	h.waitCounts("jobs", 0, 0)
	if n := len(h.inv.requests()); n != 3 {
		t.Errorf("%d invocations; want 3", n)
	}
	d := h.get("dead")
	want := amqp.Table{
		"k":                            "v",
		"x-sless-error":                "status 500: boom",
		"x-sless-attempts":             int32(3),
		"x-sless-trigger":              "shop/orders",
		"x-sless-original-exchange":    "",
		"x-sless-original-routing-key": "jobs",
	}
	if diff := cmp.Diff(want, d.Headers); diff != "" {
		t.Errorf("dead letter's headers (-want +got):\n%s", diff)
	}
	if string(d.Body) != "x" || d.MessageId != "m-1" || d.ContentType != "text/plain" {
		t.Errorf("dead letter %q, id %q, type %q; want the message as it was", d.Body, d.MessageId, d.ContentType)
	}
}

func TestDeadLetterExchange(t *testing.T) {
	h := newHarness(t, alwaysFail)
	h.channel(func(ch *amqp.Channel) error {
		return errors.Join(
			ch.ExchangeDeclare("dlx", amqp.ExchangeDirect, true, false, false, false, nil),
			declareBound(ch, "dead", "jobs", "dlx"),
		)
	})
	h.applyReady(h.trigger(func(s *triggers.RabbitMQSpec) {
		s.MaxRetries = ptr(0)
		s.DeadLetterExchange = "dlx"
	}))
	h.publish("", "jobs", amqp.Publishing{Body: []byte("x")})
	h.waitEvents(triggers.EventDeadLettered, `published to exchange "dlx"`, 1)
	h.waitCounts("jobs", 0, 0)
	d := h.get("dead")
	if d.Headers["x-sless-attempts"] != int32(1) || d.Headers["x-sless-original-routing-key"] != "jobs" || d.RoutingKey != "jobs" {
		t.Errorf("dead letter with routing key %q and headers %v; want the original routing key and 1 attempt", d.RoutingKey, d.Headers)
	}
}

// TestDeadLetterUnroutable checks that a dead letter no queue takes is held
// and retried, not lost, until a queue is bound.
func TestDeadLetterUnroutable(t *testing.T) {
	h := newHarness(t, alwaysFail)
	h.channel(func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare("dlx", amqp.ExchangeDirect, true, false, false, false, nil)
	})
	h.applyReady(h.trigger(func(s *triggers.RabbitMQSpec) {
		s.MaxRetries = ptr(0)
		s.DeadLetterExchange = "dlx"
	}))
	h.publish("", "jobs", amqp.Publishing{Body: []byte("x")})
	h.waitEvents(triggers.EventError, "no queue took the message", 1)
	h.waitCounts("jobs", 0, 1)
	h.channel(func(ch *amqp.Channel) error { return declareBound(ch, "dead", "jobs", "dlx") })
	h.waitEvents(triggers.EventDeadLettered, "", 1)
	h.waitEvents(triggers.EventHealthy, "", 2)
	h.waitCounts("jobs", 0, 0)
	h.waitCounts("dead", 1, 0)
	if n := len(h.inv.requests()); n != 1 {
		t.Errorf("%d invocations; want 1: retrying the dead letter does not invoke again", n)
	}
}

// TestRejectWithoutDeadLetterTarget checks that without a dead-letter
// exchange or queue the message is rejected to the queue's own
// dead-lettering.
func TestRejectWithoutDeadLetterTarget(t *testing.T) {
	h := newHarness(t, alwaysFail)
	h.channel(func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare("jobs", true, false, false, false, amqp.Table{"x-dead-letter-exchange": "parking"})
		return errors.Join(err,
			ch.ExchangeDeclare("parking", amqp.ExchangeFanout, true, false, false, false, nil),
			declareBound(ch, "parked", "", "parking"),
		)
	})
	h.applyReady(h.trigger(func(s *triggers.RabbitMQSpec) { s.MaxRetries = ptr(1) }))
	h.publish("", "jobs", amqp.Publishing{Body: []byte("x")})
	h.waitEvents(triggers.EventDeadLettered, "rejected after 2 attempts (status 500: boom)", 1)
	h.waitCounts("jobs", 0, 0)
	d := h.get("parked")
	if string(d.Body) != "x" || d.Headers["x-death"] == nil || d.Headers["x-sless-attempts"] != int32(2) {
		t.Errorf("parked message %q with headers %v; want the message with x-death and 2 attempts", d.Body, d.Headers)
	}
}

func TestReconnectsAfterForcedClose(t *testing.T) {
	h := newHarness(t, succeed)
	h.applyReady(h.trigger(nil))
	if err := h.vhost.CloseConnections("test"); err != nil {
		t.Fatal(err)
	}
	h.waitEvents(triggers.EventError, "CONNECTION_FORCED", 1)
	h.waitEvents(triggers.EventHealthy, "", 2)
	// An operator finds the connection by its name.
	if names, err := h.vhost.ConnectionNames(); err != nil || !slices.Contains(names, "sless trigger shop/orders") {
		t.Errorf("connection names %q, %v; want the trigger's", names, err)
	}
	h.publish("", "jobs", amqp.Publishing{Body: []byte("after")})
	h.waitEvents(triggers.EventSucceeded, "", 1)
	h.waitCounts("jobs", 0, 0)
}

// TestAckLost closes the connection while the invocation runs, so that its
// acknowledgement is lost: the redelivery is acknowledged without a second
// invocation.
func TestAckLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, id string
	}{
		{"message id", "m-1"},
		{"redelivered flag", ""}, // recognized by content, as a redelivery
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h *harness
			h = newHarness(t, func(ctx context.Context, n int, req invoke.Request) (*invoke.Response, error) {
				if n == 1 {
					if err := h.vhost.CloseConnections("test"); err != nil {
						return nil, err
					}
					// Answer once the consumer knows the connection is
					// gone, so that the acknowledgement surely fails.
					h.rep.await(triggers.EventError, "CONNECTION_FORCED", 1, waitTimeout)
				}
				return succeed(ctx, n, req)
			})
			h.applyReady(h.trigger(nil))
			h.publish("", "jobs", amqp.Publishing{MessageId: tc.id, Body: []byte("once")})
			h.waitEvents(triggers.EventSkipped, "already acknowledged", 1)
			h.waitCounts("jobs", 0, 0)
			if n := len(h.inv.requests()); n != 1 {
				t.Errorf("%d invocations; want 1", n)
			}
			if n := h.rep.count(triggers.EventHealthy, ""); n != 2 {
				t.Errorf("%d healthy events; want 2 (the start and the reconnection)", n)
			}
		})
	}
}

// TestNewIdenticalMessageRuns checks that a message without an id that
// equals one already processed runs when it is not a redelivery.
func TestNewIdenticalMessageRuns(t *testing.T) {
	h := newHarness(t, succeed)
	h.applyReady(h.trigger(nil))
	for i := 1; i <= 2; i++ {
		h.publish("", "jobs", amqp.Publishing{Body: []byte("same")})
		h.waitEvents(triggers.EventSucceeded, "", i)
	}
	if n := h.rep.count(triggers.EventSkipped, ""); n != 0 {
		t.Errorf("%d skipped events; want none", n)
	}
}

func TestPrefetchBoundsConcurrency(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, blockUntil(release))
	h.applyReady(h.trigger(func(s *triggers.RabbitMQSpec) { s.Prefetch = 2 }))
	for i := range 5 {
		h.publish("", "jobs", amqp.Publishing{Body: fmt.Appendf(nil, "%d", i)})
	}
	eventually(t, func() error {
		if n, _ := h.inv.load(); n != 2 {
			return fmt.Errorf("%d invocations in flight; want 2", n)
		}
		return nil
	})
	// The broker holds back the rest until the two are acknowledged.
	h.waitCounts("jobs", 3, 2)
	close(release)
	h.waitEvents(triggers.EventSucceeded, "", 5)
	h.waitCounts("jobs", 0, 0)
	if _, most := h.inv.load(); most != 2 {
		t.Errorf("at most %d invocations in flight; want 2", most)
	}
}

// TestSettlementsShareCommits: messages whose invocations end together are
// acknowledged in fewer transactions than messages, each of them once.
func TestSettlementsShareCommits(t *testing.T) {
	const n = 20
	release := make(chan struct{})
	h := newHarness(t, blockUntil(release))
	proxy := startCutProxy(t, h.url, math.MaxInt) // counts, never cuts
	tr := h.trigger(func(s *triggers.RabbitMQSpec) { s.Prefetch = n })
	tr.URL = proxy.url
	h.applyReady(tr)
	for i := range n {
		h.publish("", "jobs", amqp.Publishing{Body: fmt.Appendf(nil, "%d", i)})
	}
	eventually(t, func() error {
		if got, _ := h.inv.load(); got != n {
			return fmt.Errorf("%d invocations in flight; want %d", got, n)
		}
		return nil
	})
	close(release)
	h.waitEvents(triggers.EventSucceeded, "", n)
	h.waitCounts("jobs", 0, 0)
	if acks := proxy.acks.Load(); acks != n {
		t.Errorf("%d acknowledgements; want %d", acks, n)
	}
	if commits := proxy.commits.Load(); commits >= n {
		t.Errorf("%d commits for %d acknowledgements; want them to share commits", commits, n)
	}
}

func TestStopsConsuming(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		stop func(h *harness)
	}{
		{"remove", func(h *harness) { h.r.Remove(triggers.Key{Namespace: "shop", Name: "orders"}) }},
		{"disable", func(h *harness) {
			tr := h.trigger(nil)
			tr.Enabled = ptr(false)
			h.apply(tr)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, succeed)
			h.applyReady(h.trigger(nil))
			tc.stop(h)
			eventually(t, func() error {
				if q := h.inspect("jobs"); q.Consumers != 0 {
					return fmt.Errorf("queue jobs has %d consumers; want none", q.Consumers)
				}
				return nil
			})
			h.publish("", "jobs", amqp.Publishing{Body: []byte("stays")})
			if q := h.inspect("jobs"); q.Messages != 1 {
				t.Errorf("queue jobs has %d messages; want the one published", q.Messages)
			}
			if n := len(h.inv.requests()); n != 0 {
				t.Errorf("%d invocations; want none", n)
			}
		})
	}
}

func TestRemoveLetsInFlightFinish(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, blockUntil(release))
	h.applyReady(h.trigger(nil))
	h.publish("", "jobs", amqp.Publishing{Body: []byte("x")})
	waitInflight(h, 1)
	h.r.Remove(triggers.Key{Namespace: "shop", Name: "orders"})
	close(release)
	h.waitEvents(triggers.EventSucceeded, "", 1)
	h.waitCounts("jobs", 0, 0)
}

func TestStopWaitsForInFlight(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, blockUntil(release))
	h.applyReady(h.trigger(nil))
	h.publish("", "jobs", amqp.Publishing{Body: []byte("x")})
	waitInflight(h, 1)

	stopped := make(chan error, 1)
	go func() { stopped <- h.r.Stop(t.Context()) }()
	// Once the consumer is cancelled Stop waits for the invocation.
	eventually(t, func() error {
		if q := h.inspect("jobs"); q.Consumers != 0 {
			return fmt.Errorf("queue jobs has %d consumers; want none", q.Consumers)
		}
		return nil
	})
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned %v while an invocation was in flight", err)
	default:
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Stop: %v", err)
	}
	// Acknowledged before the connection closed, else it would be back.
	h.waitCounts("jobs", 0, 0)
	if err := h.r.Apply(t.Context(), h.trigger(nil)); err == nil {
		t.Error("Apply after Stop succeeded")
	}
}

func TestStopOutOfTime(t *testing.T) {
	var cancelled atomic.Bool
	h := newHarness(t, func(ctx context.Context, n int, req invoke.Request) (*invoke.Response, error) {
		<-ctx.Done()
		cancelled.Store(true)
		return nil, ctx.Err()
	})
	h.applyReady(h.trigger(nil))
	h.publish("", "jobs", amqp.Publishing{Body: []byte("x")})
	waitInflight(h, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := h.r.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop = %v; want context.DeadlineExceeded", err)
	}
	eventually(t, func() error {
		if !cancelled.Load() {
			return errors.New("the invocation's context is not cancelled")
		}
		return nil
	})
	// Unsettled, the message is back in the queue.
	h.waitCounts("jobs", 1, 0)
}

func TestApplyChanges(t *testing.T) {
	h := newHarness(t, succeed)
	key := triggers.Key{Namespace: "shop", Name: "orders"}
	h.applyReady(h.trigger(nil))
	first := h.consumer(key)

	// The defaults spelled out are no change.
	h.apply(h.trigger(func(s *triggers.RabbitMQSpec) { s.Prefetch, s.MaxRetries = DefaultPrefetch, ptr(DefaultMaxRetries) }))
	if h.consumer(key) != first {
		t.Error("Apply of an unchanged spec restarted the consumer")
	}

	h.applyReady(h.trigger(func(s *triggers.RabbitMQSpec) { s.Queue = "jobs2" }))
	if h.consumer(key) == first {
		t.Fatal("Apply of a new queue kept the consumer")
	}
	eventually(t, func() error {
		if q := h.inspect("jobs"); q.Consumers != 0 {
			return fmt.Errorf("the old queue has %d consumers; want none", q.Consumers)
		}
		return nil
	})
	h.publish("", "jobs2", amqp.Publishing{Body: []byte("x")})
	h.waitEvents(triggers.EventSucceeded, "", 1)
	if q := h.inv.requests()[0].TriggerMeta["message"].(map[string]any)["queue"]; q != "jobs2" {
		t.Errorf("invoked for queue %v; want jobs2", q)
	}
}

// TestWrongPassword checks that a refused login is reported, and that the
// password is in no event and no log line.
func TestWrongPassword(t *testing.T) {
	h := newHarness(t, succeed)
	h.password = "hunter2-wrong-password" // checked when the test ends
	h.apply(h.trigger(func(s *triggers.RabbitMQSpec) {
		s.URL = strings.Replace(s.URL, "guest:guest@", "guest:"+h.password+"@", 1)
	}))
	h.waitEvents(triggers.EventError, "username or password not allowed", 1)
	if logs := h.logs.String(); !strings.Contains(logs, "url=amqp://guest:***@") {
		t.Errorf("the log does not show the redacted URL:\n%s", logs)
	}
}

func TestApplyRejects(t *testing.T) {
	r := New(&fakeInvoker{answer: succeed}, &fakeReporter{}, slog.New(slog.DiscardHandler))
	defer r.Stop(t.Context())
	valid := func() *triggers.Trigger {
		return &triggers.Trigger{Namespace: "ns", Name: "t", Spec: triggers.Spec{
			Function: "f", Type: triggers.TypeRabbitMQ,
			RabbitMQSpec: triggers.RabbitMQSpec{URL: "amqp://u:s3cr3t@127.0.0.1:1/", Queue: "q"},
		}}
	}
	for name, edit := range map[string]func(*triggers.Trigger){
		"cron type":         func(t *triggers.Trigger) { t.Type = triggers.TypeCron },
		"no function":       func(t *triggers.Trigger) { t.Function = "" },
		"no queue":          func(t *triggers.Trigger) { t.Queue = "" },
		"http url":          func(t *triggers.Trigger) { t.URL = "http://u:s3cr3t@host/" },
		"unparsable url":    func(t *triggers.Trigger) { t.URL = "amqp://u:s3cr3t@host:port/" },
		"negative prefetch": func(t *triggers.Trigger) { t.Prefetch = -1 },
		"huge prefetch":     func(t *triggers.Trigger) { t.Prefetch = 1 << 16 },
		"negative retries":  func(t *triggers.Trigger) { t.MaxRetries = ptr(-1) },
	} {
		tr := valid()
		edit(tr)
		err := r.Apply(t.Context(), tr)
		if err == nil {
			t.Errorf("%s: Apply succeeded", name)
		} else if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: the error has the password: %v", name, err)
		}
	}
	// A disabled trigger is only removed, whatever its spec.
	tr := valid()
	tr.Queue, tr.Enabled = "", ptr(false)
	if err := r.Apply(t.Context(), tr); err != nil {
		t.Errorf("Apply of a disabled trigger: %v", err)
	}
}

// consumer returns the running consumer of key.
func (h *harness) consumer(key triggers.Key) *consumer {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	return h.r.consumers[key]
}

func waitInflight(h *harness, n int) {
	h.t.Helper()
	eventually(h.t, func() error {
		if got, _ := h.inv.load(); got != n {
			return fmt.Errorf("%d invocations in flight; want %d", got, n)
		}
		return nil
	})
}

// declareBound declares a durable queue bound to exchange with key.
func declareBound(ch *amqp.Channel, queue, key, exchange string) error {
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return err
	}
	return ch.QueueBind(queue, key, exchange, false, nil)
}

func ptr[T any](v T) *T { return &v }
