package trcontroller_test

import (
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/triggers"
)

// publish publishes the messages bodies to queue of the broker at url,
// each confirmed by the broker before publish returns.
func publish(t *testing.T, url, queue string, bodies []string) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, b := range bodies {
		c, err := ch.PublishWithDeferredConfirm("", queue, true, false, amqp.Publishing{ContentType: "application/json", Body: []byte(b)})
		if err != nil {
			t.Fatal(err)
		}
		if !c.Wait() {
			t.Fatalf("message %s not confirmed", b)
		}
	}
}

// messages returns the bodies {"n":from} to {"n":to-1}.
func messages(from, to int) []string {
	var out []string
	for n := from; n < to; n++ {
		out = append(out, fmt.Sprintf(`{"n":%d}`, n))
	}
	return out
}

// consumers returns how many consumers queue of the broker at url has.
func consumers(url, queue string) (int, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	return q.Consumers, err
}

// TestRabbitMQConsumesFromTheLeaderOnly: of two replicas, the elected one
// consumes the rabbitmq trigger's queue and invokes each message once;
// the other consumes nothing. When the leader stops, with messages in
// flight and more published while no replica leads, the other replica
// takes over: every message published is invoked exactly once, by one
// replica or the other, and the queue ends empty.
func TestRabbitMQConsumesFromTheLeaderOnly(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	c := newCluster(t)
	// The leader's invocations take a while, so that it stops with some
	// in flight and some delivered to it but not started.
	first := c.startSlow(t, 100*time.Millisecond)
	first.waitElected(t)
	second := c.start(t)
	ns := newNamespace()
	c.createFunction(t, ns, "consume")
	tr := &triggers.Trigger{Name: "orders", Namespace: ns, Spec: triggers.Spec{Function: "consume", Type: triggers.TypeRabbitMQ,
		RabbitMQSpec: triggers.RabbitMQSpec{URL: vhost.URL, Queue: "orders", Prefetch: 5}}}
	c.createTrigger(t, tr)
	eventually(t, 30*time.Second, "one consumer of the queue", func() error {
		n, err := consumers(vhost.URL, "orders")
		if err != nil || n != 1 {
			return fmt.Errorf("%d consumers, %v", n, err)
		}
		return nil
	})

	publish(t, vhost.URL, "orders", messages(0, 10))
	eventually(t, 30*time.Second, "the leader invoking the first messages", func() error {
		if n := len(first.invoker.bodies(invoke.KindRabbitMQ, tr.Name)); n != 10 {
			return fmt.Errorf("%d of 10 invoked", n)
		}
		return nil
	})
	if n := second.invoker.count(invoke.KindRabbitMQ, tr.Name); n != 0 || second.elected() {
		t.Errorf("the replica that is not the leader invoked %d messages (elected: %v); want none", n, second.elected())
	}
	eventually(t, 10*time.Second, "the counts in the status", func() error {
		if st := c.trigger(t, tr.Key()).Status; st.Phase != triggers.PhaseActive || st.Succeeded != 10 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})

	// Leadership moves while messages are in flight.
	publish(t, vhost.URL, "orders", messages(10, 40))
	eventually(t, 10*time.Second, "the leader busy with the next messages", func() error {
		if n := len(first.invoker.bodies(invoke.KindRabbitMQ, tr.Name)); n < 12 {
			return fmt.Errorf("%d invoked", n)
		}
		return nil
	})
	first.stop()
	publish(t, vhost.URL, "orders", messages(40, 60))

	all := messages(0, 60)
	eventually(t, 90*time.Second, "every message invoked", func() error {
		a, b := first.invoker.bodies(invoke.KindRabbitMQ, tr.Name), second.invoker.bodies(invoke.KindRabbitMQ, tr.Name)
		missing := 0
		for _, m := range all {
			if a[m]+b[m] == 0 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d not invoked (the leader invoked %d, the new one %d; elected: %v)",
				missing, len(all), len(a), len(b), second.elected())
		}
		return nil
	})
	// Redeliveries, if any were to come, come at once; give them a moment.
	time.Sleep(time.Second)
	a, b := first.invoker.bodies(invoke.KindRabbitMQ, tr.Name), second.invoker.bodies(invoke.KindRabbitMQ, tr.Name)
	for _, m := range all {
		if n := a[m] + b[m]; n != 1 {
			t.Errorf("message %s invoked %d times (%d by the old leader, %d by the new); want once", m, n, a[m], b[m])
		}
	}
	if len(b) == 0 {
		t.Error("the new leader invoked nothing")
	}
	eventually(t, 10*time.Second, "the queue empty", func() error {
		ready, unacked, err := vhost.QueueCounts("orders")
		if err != nil || ready != 0 || unacked != 0 {
			return fmt.Errorf("%d ready, %d unacknowledged, %v", ready, unacked, err)
		}
		return nil
	})
	t.Logf("the old leader invoked %d messages, the new one %d", len(a), len(b))
}
