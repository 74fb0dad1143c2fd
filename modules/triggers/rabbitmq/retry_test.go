package rabbitmq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"

	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/triggers"
)

// The tests here check that max_retries holds whatever interrupts the
// retries: the message runs exactly max_retries+1 times, as attempts 1, 2,
// 3, and its dead letter counts them.

// retriedTrigger is the trigger of these tests: two retries, then the
// dead-letter queue "dead".
func (h *harness) retriedTrigger() *triggers.Trigger {
	return h.trigger(func(s *triggers.RabbitMQSpec) {
		s.MaxRetries = ptr(2)
		s.DeadLetterQueue = "dead"
	})
}

// checkRanThrice checks that the one message published ran three times, as
// attempts 1 to 3, and was dead-lettered once, counting them.
func (h *harness) checkRanThrice() {
	h.t.Helper()
	h.waitEvents(triggers.EventDeadLettered, "after 3 attempts (status 500: boom)", 1)
	h.waitCounts("jobs", 0, 0)
	h.waitCounts("dead", 1, 0)
	var attempts []any
	for _, r := range h.inv.requests() {
		attempts = append(attempts, r.TriggerMeta["message"].(map[string]any)["attempt"])
	}
	if diff := cmp.Diff([]any{1, 2, 3}, attempts); diff != "" {
		h.t.Errorf("attempts of the invocations (-want +got):\n%s", diff)
	}
	if n := h.rep.count(triggers.EventDeadLettered, ""); n != 1 {
		h.t.Errorf("%d dead-lettered events; want 1", n)
	}
	if d := h.get("dead"); d.Headers["x-sless-attempts"] != int32(3) || string(d.Body) != "x" {
		h.t.Errorf("dead letter %q with headers %v; want the message with 3 attempts", d.Body, d.Headers)
	}
}

// TestRetriesCountAcrossLostConnections closes the consumer's connection
// (as a broker restart does, which then delivers the unacknowledged
// messages again) while the runs are under way and while a retry waits.
func TestRetriesCountAcrossLostConnections(t *testing.T) {
	t.Parallel()
	t.Run("during every run", func(t *testing.T) {
		var h *harness
		h = newHarness(t, func(ctx context.Context, n int, req invoke.Request) (*invoke.Response, error) {
			if err := h.vhost.CloseConnections("test"); err != nil {
				return nil, err
			}
			// Answer once the consumer knows the connection is gone, so
			// that neither a retry copy nor the dead letter can be
			// published on it.
			h.rep.await(triggers.EventError, "CONNECTION_FORCED", n, waitTimeout)
			return alwaysFail(ctx, n, req)
		})
		h.applyReady(h.retriedTrigger())
		h.publish("", "jobs", amqp.Publishing{MessageId: "m-1", Body: []byte("x")})
		h.checkRanThrice()
	})
	t.Run("while a retry waits", func(t *testing.T) {
		h := newHarness(t, alwaysFail, WithRetryBackoff(3*time.Second, 3*time.Second))
		h.applyReady(h.retriedTrigger())
		h.publish("", "jobs", amqp.Publishing{Body: []byte("x")})
		h.waitEvents(triggers.EventFailed, "attempt 1 of 3", 1)
		h.waitCounts("jobs", 0, 1) // the retry copy, held until its time
		if err := h.vhost.CloseConnections("test"); err != nil {
			t.Fatal(err)
		}
		h.waitEvents(triggers.EventError, "CONNECTION_FORCED", 1)
		h.checkRanThrice()
	})
}

// TestRetriesCountAcrossBrokerRestarts restarts a broker of the test's own
// after the first and after the second run: the retry copies, persistent
// like the message, come back with the broker.
func TestRetriesCountAcrossBrokerRestarts(t *testing.T) {
	h, node := newNodeHarness(t, alwaysFail, WithRetryBackoff(time.Second, time.Second))
	h.applyReady(h.retriedTrigger())
	h.publish("", "jobs", amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("x")})
	for n := 1; n <= 2; n++ {
		h.waitEvents(triggers.EventFailed, fmt.Sprintf("attempt %d of 3", n), 1)
		node.Restart()
	}
	h.checkRanThrice()
}

// TestRetriesCountAcrossRestarts stops the runner, as a stopping server
// does, while a retry waits and while a run is under way, and starts a new
// one each time, which knows only what the messages say.
func TestRetriesCountAcrossRestarts(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, func(ctx context.Context, n int, req invoke.Request) (*invoke.Response, error) {
		if n == 2 {
			<-release
		}
		return alwaysFail(ctx, n, req)
	}, WithRetryBackoff(time.Hour, time.Hour))
	tr := h.retriedTrigger()
	h.applyReady(tr)
	h.publish("", "jobs", amqp.Publishing{Body: []byte("x")})
	h.waitEvents(triggers.EventFailed, "attempt 1 of 3", 1)
	h.waitCounts("jobs", 0, 1) // the retry copy, held for an hour

	// A runner with a short backoff does not wait for the hour.
	h.restart(tr)
	waitInflight(h, 1)
	stopped := make(chan error, 1)
	go func() { stopped <- h.r.Stop(context.Background()) }()
	eventually(t, func() error {
		if q := h.inspect("jobs"); q.Consumers != 0 {
			return fmt.Errorf("queue jobs has %d consumers; want none", q.Consumers)
		}
		return nil
	})
	close(release) // the second run fails while the runner stops
	if err := <-stopped; err != nil {
		t.Fatalf("Stop: %v", err)
	}

	h.start(tr)
	h.checkRanThrice()
}

// TestRetryCopyBeyondBudget checks that a copy counting more runs than the
// trigger allows, as after max_retries was lowered, is dead-lettered
// without running again.
func TestRetryCopyBeyondBudget(t *testing.T) {
	h := newHarness(t, alwaysFail)
	h.applyReady(h.retriedTrigger())
	h.publish("", "jobs", amqp.Publishing{Body: []byte("x"), Headers: amqp.Table{
		"x-sless-attempts": int32(5), "x-sless-retry-at": time.Now().UnixMilli(), "x-sless-error": "status 502",
	}})
	h.waitEvents(triggers.EventDeadLettered, "after 5 attempts (status 502)", 1)
	h.waitCounts("dead", 1, 0)
	if n := len(h.inv.requests()); n != 0 {
		t.Errorf("%d invocations; want none", n)
	}
	if d := h.get("dead"); d.Headers["x-sless-attempts"] != int32(5) {
		t.Errorf("dead letter with headers %v; want 5 attempts", d.Headers)
	}
}
