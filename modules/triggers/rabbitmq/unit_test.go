package rabbitmq

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"

	"sless.kube5s.ru/sless/modules/triggers"
)

func TestBackoff(t *testing.T) {
	b := backoff{time.Second, 30 * time.Second}
	var got []time.Duration
	for n := 1; n <= 7; n++ {
		got = append(got, b.delay(n))
	}
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30}
	for i := range want {
		want[i] *= time.Second
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("delays (-want +got):\n%s", diff)
	}
}

func TestSettledSet(t *testing.T) {
	s := newSettledSet(2)
	s.add("a", ack)
	s.add("b", reject)
	s.add("a", ack) // a is now the most recent
	s.add("c", ack) // evicts b
	for key, want := range map[string]bool{"a": true, "b": false, "c": true} {
		if _, ok := s.get(key); ok != want {
			t.Errorf("get(%q) found %t; want %t", key, ok, want)
		}
	}
	s.add("a", reject)
	if o, _ := s.get("a"); o != reject {
		t.Errorf("get(a) = %v after it was settled again; want reject", o)
	}
}

func TestJSONValue(t *testing.T) {
	stamp := time.Date(2024, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 3600))
	headers := amqp.Table{
		"text":    "t",
		"bytes":   []byte("hi"),
		"binary":  []byte{0xff, 0x00},
		"decimal": amqp.Decimal{Scale: 2, Value: 12345},
		"time":    stamp,
		"nan":     math.NaN(),
		"inf":     float32(math.Inf(1)),
		"x-death": []any{amqp.Table{"count": int64(1), "time": stamp}},
		"nil":     nil,
	}
	got, err := json.Marshal(jsonTable(headers))
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	want := `{"binary":"/wA=","bytes":"hi","decimal":123.45,"inf":"+Inf","nan":"NaN","nil":null,"text":"t",` +
		`"time":"2024-01-02T02:04:05Z","x-death":[{"count":1,"time":"2024-01-02T02:04:05Z"}]}`
	if string(got) != want {
		t.Errorf("headers as JSON:\n got %s\nwant %s", got, want)
	}
	if m := jsonTable(nil); m == nil || len(m) != 0 {
		t.Errorf("jsonTable(nil) = %#v; want an empty map", m)
	}
}

func TestSettledKey(t *testing.T) {
	msg := func(edit func(d *amqp.Delivery)) *amqp.Delivery {
		d := &amqp.Delivery{Exchange: "x", RoutingKey: "k", Headers: amqp.Table{"a": "1", "b": int32(2)}, Body: []byte("body")}
		if edit != nil {
			edit(d)
		}
		return d
	}
	if key, check := settledKey(msg(func(d *amqp.Delivery) { d.MessageId = "m" })); key != "id:m" || !check {
		t.Errorf("with a message id: %q, check %t; want id:m, checked", key, check)
	}
	plain, check := settledKey(msg(nil))
	if check {
		t.Error("a first delivery without a message id is looked up; only redeliveries should be")
	}
	redelivered, check := settledKey(msg(func(d *amqp.Delivery) { d.Redelivered = true; d.DeliveryTag = 9 }))
	if !check || redelivered != plain {
		t.Errorf("a redelivery: key %q, check %t; want the first delivery's key %q, checked", redelivered, check, plain)
	}
	for name, edit := range map[string]func(d *amqp.Delivery){
		"body":        func(d *amqp.Delivery) { d.Body = []byte("other") },
		"routing key": func(d *amqp.Delivery) { d.RoutingKey = "other" },
		"exchange":    func(d *amqp.Delivery) { d.Exchange = "other" },
		"header":      func(d *amqp.Delivery) { d.Headers["a"] = "2" },
		"boundary":    func(d *amqp.Delivery) { d.Exchange, d.RoutingKey = "xk", "" },
	} {
		if key, _ := settledKey(msg(edit)); key == plain {
			t.Errorf("another %s gives the same key", name)
		}
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"0123456789abc", 10, "0123456..."},
		{"ééééé", 8, "éé..."}, // never cuts a character in two
	} {
		if got := truncate(tc.in, tc.n); got != tc.want || len(got) > tc.n {
			t.Errorf("truncate(%q, %d) = %q; want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestDeadLetterMessage(t *testing.T) {
	d := &amqp.Delivery{
		Headers: amqp.Table{"k": "v"}, ContentType: "text/plain", DeliveryMode: amqp.Persistent,
		MessageId: "m", Expiration: "60000", UserId: "someone", RoutingKey: "rk", Body: []byte("b"),
	}
	p := deadLetterMessage(d, triggers.Key{Namespace: "ns", Name: "t"}, "status 500", 4)
	if p.Expiration != "" || p.UserId != "" {
		t.Errorf("dead letter keeps expiration %q and user id %q; want neither", p.Expiration, p.UserId)
	}
	if p.DeliveryMode != amqp.Persistent || p.MessageId != "m" || string(p.Body) != "b" {
		t.Errorf("dead letter %+v; want the original's properties and body", p)
	}
	if _, ok := d.Headers["x-sless-error"]; ok {
		t.Error("deadLetterMessage changed the delivery's headers")
	}
	if err := p.Headers.Validate(); err != nil {
		t.Errorf("headers: %v", err)
	}
	if got := p.Headers["x-sless-trigger"]; got != "ns/t" {
		t.Errorf("x-sless-trigger = %v; want ns/t", got)
	}
}
