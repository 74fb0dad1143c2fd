package metricspush_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/server/metricspush"
)

// TestPushToVictoriaMetrics pushes a counter, a labelled gauge and a
// histogram to a real VictoriaMetrics and queries them back with PromQL.
func TestPushToVictoriaMetrics(t *testing.T) {
	vm := testenv.StartVictoriaMetrics(t)
	reg := prometheus.NewRegistry()
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_calls_total", Help: "calls"}, []string{"function"})
	lat := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "test_latency_seconds", Help: "latency", Buckets: []float64{.1, 1}})
	reg.MustRegister(calls, lat)
	calls.WithLabelValues("hello").Add(7)
	calls.WithLabelValues("bye").Add(2)
	for _, v := range []float64{.05, .5, .5, 3} {
		lat.Observe(v)
	}
	p, err := metricspush.New(metricspush.Config{URL: vm.ImportURL() + "?extra_label=instance=test", Interval: 100 * time.Millisecond},
		reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The last push, at Stop, carries the final values.
	calls.WithLabelValues("hello").Inc()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for query, want := range map[string]float64{
		`test_calls_total{function="hello",instance="test"}`:   8,
		`test_calls_total{function="bye"}`:                     2,
		`test_latency_seconds_count`:                           4,
		`test_latency_seconds_bucket{le="1"}`:                  3,
		`histogram_quantile(0.5, test_latency_seconds_bucket)`: 0.55,
		`sum(sless_metrics_push_failures_total) or vector(0)`:  0,
	} {
		got := poll(t, vm, query, want)
		if got != want {
			t.Errorf("%s = %v, want %v", query, got, want)
		}
	}
}

// TestPushFailureIsCounted: a receiver that cannot be reached fails the
// push, which is counted, and the error does not show the password.
func TestPushFailureIsCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, err := metricspush.New(metricspush.Config{URL: "http://vm:s3cret@127.0.0.1:" + testenv.FreePort(t) + "/api/v1/import/prometheus"},
		reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	err = p.Push(context.Background())
	if err == nil {
		t.Fatal("a push to a closed port succeeded")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error shows the password: %v", err)
	}
	fams, _ := reg.Gather()
	if len(fams) != 1 || fams[0].GetMetric()[0].GetCounter().GetValue() != 1 {
		t.Errorf("failures counted: %v, want sless_metrics_push_failures_total 1", fams)
	}
}

// poll queries until the answer is want or 15 s pass, and returns the last
// answer (the sum of its series).
func poll(t *testing.T, vm testenv.VictoriaMetrics, query string, want float64) float64 {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		samples, err := vm.Query(query)
		if err != nil {
			t.Fatal(err)
		}
		got := 0.0
		for _, s := range samples {
			got += s.Value
		}
		if (got == want && len(samples) > 0) || time.Now().After(deadline) {
			return got
		}
		time.Sleep(100 * time.Millisecond)
	}
}
