package e2e

import (
	"context"
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
	s.waitFor("the consumer to connect", func() bool { return s.getTrigger("orders").Status.Phase == "Active" })
	if out := s.mustCLI("trigger", "get", "orders"); strings.Contains(out, "guest:guest") || !strings.Contains(out, "***") {
		t.Errorf("the broker password is shown:\n%s", out)
	}

	conn, err := amqp.Dial(vhost.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
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
	conn2, err := amqp.Dial(vhost.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	if ch, err = conn2.Channel(); err != nil {
		t.Fatal(err)
	}
	publish(`{"n": 3}`)
	s.waitFor("a message after the forced close to be processed", func() bool { return len(byStatus("success")) == 2 })
}
