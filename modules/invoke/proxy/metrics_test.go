package proxy

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/meta"
)

// TestMetricsPhasesAndForget: a cold start and a warm invocation count
// into the function's histograms by phase; forgetting the function drops
// every series of it.
func TestMetricsPhasesAndForget(t *testing.T) {
	m := newMetrics()
	key := meta.Key{Namespace: "team-a", Name: "hello"}
	cold := &invoke.Record{StatusCode: 200, QueueMS: 2, ColdStart: true, ColdStartMS: 30, HandlerMS: 5}
	warm := &invoke.Record{StatusCode: 200, QueueMS: 1, HandlerMS: 4}
	timedOut := &invoke.Record{StatusCode: http.StatusGatewayTimeout, QueueMS: 1}
	for _, inv := range []struct {
		rec     *invoke.Record
		refusal outcome
		kind    string
	}{{cold, outcomeNone, invoke.KindHTTP}, {warm, outcomeNone, invoke.KindCron}, {timedOut, outcomeTimeout, invoke.KindHTTP}} {
		c := &call{ns: key.Namespace, name: key.Name, kind: inv.kind, refusal: inv.refusal, leased: true}
		m.observe(m.lookup(key), c, inv.rec, 50*time.Millisecond)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	for name, want := range map[string]int{
		"sless_invocations_total": 3, "sless_invocation_cold_starts_total": 1, "sless_invocation_duration_seconds": 1,
		"sless_invocation_phase_seconds": 3, "sless_invocations_not_found_total": 1,
	} {
		if got := testutil.CollectAndCount(m, name); got != want {
			t.Errorf("%s: got %d series, want %d", name, got, want)
		}
	}
	fs := m.lookup(key)
	checks := []struct {
		name string
		got  uint64
		want uint64
	}{
		{"http 2xx", fs.calls[kindIndex(invoke.KindHTTP)][outcome2xx].Load(), 1},
		{"cron 2xx", fs.calls[kindIndex(invoke.KindCron)][outcome2xx].Load(), 1},
		{"http timeout", fs.calls[kindIndex(invoke.KindHTTP)][outcomeTimeout].Load(), 1},
		{"cold starts", fs.colds.Load(), 1},
		{"durations", histCount(t, fs.duration), 3},
		{"queue phases", histCount(t, fs.queue), 3},
		{"cold phases", histCount(t, fs.cold), 1},
		{"handler phases (not the timeout's)", histCount(t, fs.handler), 2},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, c.got, c.want)
		}
	}
	m.forget(key)
	if n := testutil.CollectAndCount(m); n != 1 {
		t.Errorf("after forget: %d series, want only the unlabelled not-found counter", n)
	}
}

func histCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	h.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestObserveAllocatesNothing: counting an invocation into a function's
// existing series allocates nothing.
func TestObserveAllocatesNothing(t *testing.T) {
	m := newMetrics()
	key := meta.Key{Namespace: "default", Name: "hello"}
	m.create(key)
	c := &call{ns: key.Namespace, name: key.Name, kind: invoke.KindHTTP, leased: true}
	rec := &invoke.Record{StatusCode: 200, QueueMS: 0.01, HandlerMS: 0.2}
	if n := testing.AllocsPerRun(1000, func() { m.observe(m.lookup(key), c, rec, time.Millisecond) }); n != 0 {
		t.Errorf("observe allocates %v times per invocation, want 0", n)
	}
}

// BenchmarkObserve is what the metrics add to an invocation: the lookup of
// the function's series before it runs and the counting after it.
func BenchmarkObserve(b *testing.B) {
	m := newMetrics()
	for i := range 1000 {
		m.create(meta.Key{Namespace: "default", Name: "fn-" + string(rune('a'+i%26)) + string(rune('a'+i/26))})
	}
	key := meta.Key{Namespace: "default", Name: "hello"}
	m.create(key)
	c := &call{ns: key.Namespace, name: key.Name, kind: invoke.KindHTTP, leased: true}
	rec := &invoke.Record{StatusCode: 200, QueueMS: 0.01, HandlerMS: 0.2}
	b.ReportAllocs()
	for b.Loop() {
		m.observe(m.lookup(key), c, rec, time.Millisecond)
	}
}

// BenchmarkTraceContext is what traces add to an invocation without an
// exporter: reading the request's traceparent (present or not) and making
// the handler's.
func BenchmarkTraceContext(b *testing.B) {
	p := &Proxy{}
	u := uuid.Must(uuid.NewV7())
	for _, tc := range []struct{ name, header string }{
		{"without traceparent", ""},
		{"with traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	} {
		r := &http.Request{Header: http.Header{}}
		if tc.header != "" {
			r.Header["Traceparent"] = []string{tc.header}
		}
		c := &call{r: r}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s := p.startSpan(c, u)
				c.traceparent = s.handlerTraceparent()
			}
		})
	}
}
