package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.kube5s.ru/sless/internal/testenv"
)

// TestRabbitMQTrigger runs a function on messages of a real broker: success
// is acked, failure is retried then dead-lettered, and a forced close of the
// broker's connections is survived.
func TestRabbitMQTrigger(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	s := startServer(t, serverOptions{})
	dir := writeTree(t, map[string]string{"handler.py": `def handle(event, context):
    msg = context.trigger["message"]
    print("got", event, "routing key", msg["routing_key"])
    if event.get("fail"):
        raise RuntimeError("refused " + str(event["n"]))
    return {"n": event["n"]}
`})
	s.mustCLI("deploy", dir, "--name", "consumer", "--runtime", "python3.11", "--http=false")
	s.mustCLI("trigger", "create", "orders", "--function", "consumer", "--type", "rabbitmq", "--url", vhost.URL,
		"--queue", "orders", "--max-retries", "1", "--dead-letter-queue", "orders-failed")
	waitConsuming(s, vhost, "orders", "orders")
	if out := s.mustCLI("trigger", "get", "orders"); strings.Contains(out, "guest:guest") || !strings.Contains(out, "***") {
		t.Errorf("the broker password is shown:\n%s", out)
	}

	ch := amqpChannel(t, vhost.URL)
	publish := func(body string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := ch.PublishWithContext(ctx, "", "orders", false, false,
			amqp.Publishing{ContentType: "application/json", Body: []byte(body), MessageId: body}); err != nil {
			t.Fatal(err)
		}
	}
	byStatus := func(status string) []record {
		return s.invocations("triggers/orders/invocations?status=" + status)
	}

	publish(`{"n": 1}`)
	s.waitFor("the message to be processed and acked", func() bool {
		ready, unacked, err := vhost.QueueCounts("orders")
		return err == nil && ready == 0 && unacked == 0 && len(byStatus("success")) == 1
	})
	if rec := s.waitInvocation(byStatus("success")[0].ID); rec.TriggerKind != "rabbitmq" || !strings.Contains(rec.Logs, "routing key orders") {
		t.Errorf("invocation record: %+v", rec)
	}

	publish(`{"n": 2, "fail": true}`)
	s.waitFor("the failing message in the dead-letter queue", func() bool {
		ready, _, err := vhost.QueueCounts("orders-failed")
		return err == nil && ready == 1
	})
	if failed := byStatus("error"); len(failed) != 2 {
		t.Errorf("failed attempts recorded: %d, want 2 (the first and one retry)", len(failed))
	}
	s.waitFor("the status to count the dead letter", func() bool { return s.getTrigger("orders").Status.Dead == 1 })

	if err := vhost.CloseConnections("test: broker restart"); err != nil {
		t.Fatal(err)
	}
	// Publish on a new connection: the test's own was closed too.
	ch = amqpChannel(t, vhost.URL)
	publish(`{"n": 3}`)
	s.waitFor("a message after the forced close to be processed", func() bool { return len(byStatus("success")) == 2 })
}

// TestRabbitMQRetriesSurviveRestarts checks that max_retries holds when,
// between the runs of a failing message, sless stops (SIGTERM), sless is
// killed (kill -9, while the retry waits out its backoff) and the broker
// drops its connections: it runs exactly max_retries+1 times, as attempts 1
// to 5, and its dead letter counts them.
func TestRabbitMQRetriesSurviveRestarts(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	s := startServer(t, serverOptions{})
	dir := writeTree(t, map[string]string{"handler.py": `def handle(event, context):
    print("attempt", context.trigger["message"]["attempt"])
    raise RuntimeError("refused")
`})
	s.mustCLI("deploy", dir, "--name", "refuser", "--runtime", "python3.11", "--http=false")
	s.mustCLI("trigger", "create", "orders", "--function", "refuser", "--type", "rabbitmq", "--url", vhost.URL,
		"--queue", "orders", "--max-retries", "4", "--dead-letter-queue", "orders-failed")
	waitConsuming(s, vhost, "orders", "orders")

	publishOnce(t, vhost.URL, "orders", amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: []byte(`{}`), MessageId: "m-1",
	})
	failed := func() []record { return s.invocations("triggers/orders/invocations?status=error") }
	waitRuns := func(n int) {
		t.Helper()
		s.waitFor(fmt.Sprintf("run %d", n), func() bool { return len(failed()) >= n })
	}
	waitRuns(1)
	s.restart()
	waitRuns(2)
	// The retry after the third run waits 4 s: the kill comes within it,
	// although rabbitmqctl alone can take a second or two on a busy machine.
	waitRuns(3)
	// Only the copy that counts three runs, held for its retry: the run's
	// delivery is acknowledged. A kill before that acknowledgement reaches
	// the broker would leave both, and the third run would run again (the
	// price of publishing the copy before acknowledging; see the README).
	s.waitFor("the third run's copy alone in the queue", func() bool {
		ready, unacked, err := vhost.QueueCounts("orders")
		return err == nil && ready == 0 && unacked == 1
	})
	s.crash()
	s.start()
	waitRuns(4)
	if err := vhost.CloseConnections("test: broker restart"); err != nil {
		t.Fatal(err)
	}
	s.waitFor("the message in the dead-letter queue", func() bool {
		ready, unacked, err := vhost.QueueCounts("orders")
		dead, _, errDead := vhost.QueueCounts("orders-failed")
		return err == nil && errDead == nil && ready == 0 && unacked == 0 && dead == 1
	})

	var attempts []string
	for _, rec := range failed() {
		// The first line; the traceback follows.
		first, _, _ := strings.Cut(s.waitInvocation(rec.ID).Logs, "\n")
		attempts = append(attempts, first)
	}
	slices.Sort(attempts)
	if want := []string{"attempt 1", "attempt 2", "attempt 3", "attempt 4", "attempt 5"}; !slices.Equal(attempts, want) {
		t.Errorf("runs logged %q; want %q", attempts, want)
	}
	ch := amqpChannel(t, vhost.URL)
	d, ok, err := ch.Get("orders-failed", true)
	if err != nil || !ok {
		t.Fatalf("get the dead letter: %v, %t", err, ok)
	}
	if d.Headers["x-sless-attempts"] != int32(5) || d.MessageId != "m-1" {
		t.Errorf("dead letter %q with headers %v; want m-1 with 5 attempts", d.MessageId, d.Headers)
	}
}

// amqpChannel opens a connection to url and a channel on it, closed when
// the test ends.
func amqpChannel(t *testing.T, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// publishOnce publishes msg to queue through the default exchange on a
// connection of its own, and waits for the broker's confirmation.
func publishOnce(t *testing.T, url, queue string, msg amqp.Publishing) {
	t.Helper()
	ch := amqpChannel(t, url)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	confirm, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, msg)
	if err != nil {
		t.Fatal(err)
	}
	if acked, err := confirm.WaitContext(ctx); err != nil || !acked {
		t.Fatalf("publish to queue %s: confirmed %t, %v", queue, acked, err)
	}
	// The broker sends the return of an unroutable message before its
	// confirmation.
	select {
	case <-returns:
		t.Fatalf("publish to queue %s: no such queue", queue)
	default:
	}
}

// waitConsuming waits until trigger is Active and its queue exists: Active
// says the trigger is applied, and its consumer connects in the background,
// declaring the queue, which a message published before would not reach.
func waitConsuming(s *server, vhost testenv.RabbitMQVhost, trigger, queue string) {
	s.t.Helper()
	s.waitFor("the trigger to be active", func() bool { return s.getTrigger(trigger).Status.Phase == "Active" })
	s.waitFor("queue "+queue+" to be declared", func() bool {
		_, _, err := vhost.QueueCounts(queue)
		return err == nil
	})
}

// A run that a kill -9 of sless interrupts is in the ledger as such after
// the restart, beside the re-run of the redelivered message.
func TestRabbitMQRunInterruptedByACrash(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	s := startServer(t, serverOptions{})
	// The function tells the test that it runs over the network (a
	// sandboxed instance cannot write the test's files).
	started := make(chan struct{}, 10)
	recorder := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { started <- struct{}{} }))
	t.Cleanup(recorder.Close)
	dir := writeTree(t, map[string]string{"handler.py": fmt.Sprintf(`import time, urllib.request
def handle(event, context):
    urllib.request.urlopen("%s/").read()
    time.sleep(2)
    return {"ok": True}
`, recorder.URL)})
	s.mustCLI("deploy", dir, "--name", "slow", "--runtime", "python3.11", "--http=false")
	s.mustCLI("trigger", "create", "orders", "--function", "slow", "--type", "rabbitmq", "--url", vhost.URL, "--queue", "orders")
	waitConsuming(s, vhost, "orders", "orders")

	publishOnce(t, vhost.URL, "orders", amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(`{}`)})
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the function did not start")
	}
	s.crash()
	s.start()
	var recs []record
	s.waitFor("the interrupted run and the re-run", func() bool {
		recs = s.invocations("triggers/orders/invocations")
		return len(recs) == 2 && recs[0].StatusCode == http.StatusOK
	})
	if got := recs[1]; got.StatusCode != http.StatusBadGateway || got.Error != "interrupted: the server stopped during the run" {
		t.Errorf("the run the crash interrupted: %+v; want a 502 saying so", got)
	}
}
