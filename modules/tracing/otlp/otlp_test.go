package otlp_test

import (
	"context"
	"encoding/hex"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"sless.kube5s.ru/sless/internal/otlptest"
	"sless.kube5s.ru/sless/modules/tracing"
	"sless.kube5s.ru/sless/modules/tracing/otlp"
)

// TestExport sends spans to an OTLP receiver and reads them back as it
// decoded them.
func TestExport(t *testing.T) {
	rcv := otlptest.New(t)
	reg := prometheus.NewRegistry()
	e, err := otlp.New(otlp.Config{URL: rcv.URL, SampleRatio: 1, Headers: map[string]string{"X-Api-Key": "k"}}, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	trace, _ := tracing.Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	start := time.Unix(1_800_000_000, 0)
	e.Export(
		tracing.Span{Name: "invoke default/hello", TraceID: trace.TraceID, SpanID: tracing.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
			Parent: trace.SpanID, Kind: tracing.KindServer, Start: start, End: start.Add(30 * time.Millisecond),
			Attributes: []tracing.Attribute{tracing.String("sless.function", "hello"), tracing.Int("http.response.status_code", 504)},
			Error:      "timed out"},
		tracing.Span{Name: "handler", TraceID: trace.TraceID, SpanID: tracing.SpanID{9}, Parent: tracing.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
			Start: start.Add(time.Millisecond), End: start.Add(29 * time.Millisecond)},
	)
	deadline := time.Now().Add(10 * time.Second)
	for len(rcv.Spans()) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	got := rcv.Spans()
	if len(got) != 2 {
		t.Fatalf("received %d spans, want 2", len(got))
	}
	inv := got[0]
	checks := []struct{ what, got, want string }{
		{"name", inv.GetName(), "invoke default/hello"},
		{"trace id", hex.EncodeToString(inv.GetTraceId()), "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"parent", hex.EncodeToString(inv.GetParentSpanId()), "00f067aa0ba902b7"},
		{"kind", inv.GetKind().String(), "SPAN_KIND_SERVER"},
		{"status", inv.GetStatus().GetCode().String() + " " + inv.GetStatus().GetMessage(), "STATUS_CODE_ERROR timed out"},
		{"function", inv.Attributes["sless.function"], "hello"},
		{"status code", inv.Attributes["http.response.status_code"], "504"},
		{"service", inv.Resource["service.name"], "sless"},
		{"duration", time.Duration(inv.GetEndTimeUnixNano() - inv.GetStartTimeUnixNano()).String(), "30ms"},
		{"handler's parent", hex.EncodeToString(got[1].GetParentSpanId()), "0102030405060708"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %q, want %q", c.what, c.got, c.want)
		}
	}
	// The receiver holds the spans before the exporter has its answer and
	// counts them; Stop waits for the exporter's loop to end.
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(counter(t, reg, "sless_trace_spans_exported_total")); n != 2 {
		t.Errorf("exported %v spans, want 2", n)
	}
}

// TestSampleRatio: the ratio decides by the trace id, the same way each
// time, and 0 and 1 decide every id alike.
func TestSampleRatio(t *testing.T) {
	for _, tc := range []struct {
		ratio float64
		min   int
		max   int
	}{{0, 0, 0}, {1, 1000, 1000}, {0.25, 200, 300}} {
		e, err := otlp.New(otlp.Config{URL: "http://127.0.0.1:1/v1/traces", SampleRatio: tc.ratio}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for i := range 1000 {
			var id tracing.TraceID
			for j := range id {
				id[j] = byte((i*7919 + j*104729) >> (j % 5))
			}
			id[15], id[8] = byte(i), byte(i*31)
			if e.Sampled(id) {
				n++
			}
			if e.Sampled(id) != e.Sampled(id) {
				t.Fatalf("sampling of one id changed")
			}
		}
		if n < tc.min || n > tc.max {
			t.Errorf("ratio %v sampled %d of 1000, want %d to %d", tc.ratio, n, tc.min, tc.max)
		}
	}
	if _, err := otlp.New(otlp.Config{URL: "http://x/v1/traces", SampleRatio: 1.5}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler)); err == nil {
		t.Errorf("a ratio of 1.5 was accepted")
	}
}

// counter returns the one counter named name of reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	return gathered{reg, name}
}

type gathered struct {
	reg  *prometheus.Registry
	name string
}

func (g gathered) Describe(chan<- *prometheus.Desc) {}
func (g gathered) Collect(ch chan<- prometheus.Metric) {
	fams, _ := g.reg.Gather()
	for _, f := range fams {
		if f.GetName() == g.name {
			ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(g.name, "", nil, nil), prometheus.CounterValue, f.GetMetric()[0].GetCounter().GetValue())
		}
	}
}
