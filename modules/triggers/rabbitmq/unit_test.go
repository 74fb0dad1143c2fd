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

func TestMemory(t *testing.T) {
	s := newMemory(2)
	s.add("a", memo{outcome: ack})
	s.add("b", memo{outcome: reject})
	s.add("a", memo{outcome: ack})              // a is now the most recent
	s.add("c", memo{history: history{runs: 1}}) // evicts b
	for key, want := range map[string]bool{"a": true, "b": false, "c": true} {
		if _, ok := s.get(key); ok != want {
			t.Errorf("get(%q) found %t; want %t", key, ok, want)
		}
	}
	s.add("c", memo{outcome: reject})
	if m, _ := s.get("c"); m.outcome != reject {
		t.Errorf("get(c) = %v after it was settled; want reject", m.outcome)
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
	withID := msg(func(d *amqp.Delivery) { d.MessageId = "m" })
	first, check := settledKey(withID, 0)
	if !check {
		t.Error("a message with an id is not looked up")
	}
	if retried, check := settledKey(withID, 1); retried == first || !check {
		t.Errorf("a retry copy with an id: key %q, check %t; want another key than the first delivery's, checked", retried, check)
	}
	if other, _ := settledKey(msg(func(d *amqp.Delivery) { d.MessageId = "1:m" }), 0); other == first {
		t.Error("message ids m and 1:m give the same key")
	}
	plain, check := settledKey(msg(nil), 0)
	if check {
		t.Error("a first delivery without a message id is looked up; only redeliveries should be")
	}
	if _, check := settledKey(msg(nil), 1); !check {
		t.Error("a retry copy without a message id is not looked up")
	}
	redelivered, check := settledKey(msg(func(d *amqp.Delivery) { d.Redelivered = true; d.DeliveryTag = 9 }), 0)
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
		if key, _ := settledKey(msg(edit), 0); key == plain {
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

func TestRepublished(t *testing.T) {
	d := &amqp.Delivery{
		Headers: amqp.Table{"k": "v"}, ContentType: "text/plain", DeliveryMode: amqp.Persistent,
		MessageId: "m", Expiration: "60000", UserId: "someone", Exchange: "shop", RoutingKey: "order.new", Body: []byte("b"),
	}
	key := triggers.Key{Namespace: "ns", Name: "t"}
	h := historyOf(d).failed("status 500", time.Minute)
	p := retryCopy(d, key, h)
	if p.Headers[headerRetryAt] != h.retryAt.UnixMilli() {
		t.Errorf("retry copy's %s is %v; want %d", headerRetryAt, p.Headers[headerRetryAt], h.retryAt.UnixMilli())
	}
	if dl := deadLetterMessage(&amqp.Delivery{Headers: p.Headers}, key, h); dl.Headers[headerRetryAt] != nil {
		t.Errorf("a dead letter carries %s: %v", headerRetryAt, dl.Headers[headerRetryAt])
	}
	if p.Expiration != "" || p.UserId != "" {
		t.Errorf("retry copy keeps expiration %q and user id %q; want neither", p.Expiration, p.UserId)
	}
	if p.DeliveryMode != amqp.Persistent || p.MessageId != "m" || p.ContentType != "text/plain" || string(p.Body) != "b" {
		t.Errorf("retry copy %+v; want the original's properties and body", p)
	}
	if len(d.Headers) != 1 {
		t.Errorf("retryCopy changed the delivery's headers: %v", d.Headers)
	}
	if err := p.Headers.Validate(); err != nil {
		t.Errorf("headers: %v", err)
	}

	// The copy comes back through the default exchange, with its history.
	copied := &amqp.Delivery{Headers: p.Headers, RoutingKey: "jobs", MessageId: "m", Body: p.Body}
	got := historyOf(copied)
	want := history{runs: 1, why: "status 500", retryAt: time.UnixMilli(h.retryAt.UnixMilli()), exchange: "shop", routingKey: "order.new"}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(history{})); diff != "" {
		t.Errorf("history of the copy (-want +got):\n%s", diff)
	}

	dead := deadLetterMessage(copied, key, got.failed("status 502", time.Minute))
	if diff := cmp.Diff(amqp.Table{
		"k":                            "v",
		"x-sless-error":                "status 502",
		"x-sless-attempts":             int32(2),
		"x-sless-trigger":              "ns/t",
		"x-sless-original-exchange":    "shop",
		"x-sless-original-routing-key": "order.new",
	}, dead.Headers); diff != "" {
		t.Errorf("dead letter's headers (-want +got):\n%s", diff)
	}
	// A dead letter published to the queue again runs afresh.
	replayed := historyOf(&amqp.Delivery{Headers: dead.Headers, RoutingKey: "jobs"})
	if replayed.runs != 0 || replayed.routingKey != "jobs" {
		t.Errorf("history of a replayed dead letter %+v; want no runs, and where it was published", replayed)
	}
}

func TestHistoryOfHeaders(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	for _, tc := range []struct {
		name    string
		headers amqp.Table
		want    history
	}{
		{"first publication", nil, history{exchange: "x", routingKey: "k"}},
		{"count without retry time", amqp.Table{"x-sless-attempts": int32(2)}, history{exchange: "x", routingKey: "k"}},
		{"retry copy", amqp.Table{"x-sless-attempts": int32(2), "x-sless-retry-at": at.UnixMilli(), "x-sless-error": "e", "x-sless-original-exchange": "", "x-sless-original-routing-key": "o"},
			history{runs: 2, why: "e", retryAt: at, exchange: "", routingKey: "o"}},
		{"other integer types", amqp.Table{"x-sless-attempts": uint8(3), "x-sless-retry-at": int64(at.UnixMilli())},
			history{runs: 3, retryAt: at, exchange: "x", routingKey: "k"}},
		{"count that is no integer", amqp.Table{"x-sless-attempts": "2", "x-sless-retry-at": at.UnixMilli()},
			history{retryAt: at, exchange: "x", routingKey: "k"}},
		{"negative count", amqp.Table{"x-sless-attempts": int16(-4), "x-sless-retry-at": at.UnixMilli()},
			history{retryAt: at, exchange: "x", routingKey: "k"}},
	} {
		got := historyOf(&amqp.Delivery{Headers: tc.headers, Exchange: "x", RoutingKey: "k"})
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(history{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}
