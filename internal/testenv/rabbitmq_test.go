package testenv_test

import (
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.kube5s.ru/sless/internal/testenv"
)

func TestRabbitMQ(t *testing.T) {
	t.Parallel()
	var vhost testenv.RabbitMQVhost
	t.Run("use", func(t *testing.T) {
		vhost = testenv.RabbitMQ(t)
		props := amqp.NewConnectionProperties()
		props.SetClientConnectionName("testenv probe")
		conn, err := amqp.DialConfig(vhost.URL, amqp.Config{Properties: props})
		if err != nil {
			t.Fatalf("dial the vhost's URL: %v", err)
		}
		defer conn.Close()
		names, err := vhost.ConnectionNames()
		if err != nil || len(names) != 1 || names[0] != "testenv probe" {
			t.Errorf("ConnectionNames = %q, %v; want [testenv probe]", names, err)
		}
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("probe", false, false, false, false, nil); err != nil {
			t.Fatalf("declare a queue in the vhost: %v", err)
		}
		if err := ch.Publish("", "probe", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		pollCounts(t, vhost, "probe", 1, 0)

		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		if err := vhost.CloseConnections("testenv test"); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-closed:
			if err == nil || err.Code != amqp.ConnectionForced {
				t.Errorf("connection closed with %v; want CONNECTION_FORCED", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the connection is still open after CloseConnections")
		}
	})
	if t.Skipped() || vhost.URL == "" {
		return
	}
	_, err := amqp.Dial(vhost.URL)
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) {
		t.Errorf("dial vhost %s after its test: %v; want it deleted (an AMQP error)", vhost.Name, err)
	}
}

// pollCounts waits until the queue's counts are ready and unacked.
func pollCounts(t *testing.T, vhost testenv.RabbitMQVhost, queue string, ready, unacked int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, u, err := vhost.QueueCounts(queue)
		if err == nil && r == ready && u == unacked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s: ready %d, unacked %d, %v; want %d, %d", queue, r, u, err, ready, unacked)
		}
	}
}

func TestRabbitMQSeparate(t *testing.T) {
	t.Parallel()
	a, b := testenv.RabbitMQ(t), testenv.RabbitMQ(t)
	if a.Name == b.Name || a.URL == b.URL {
		t.Errorf("two calls share a vhost: %+v, %+v", a, b)
	}
}
