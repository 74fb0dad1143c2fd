package cli

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

const topBefore = `
# TYPE sless_invocations_total counter
sless_invocations_total{namespace="default",function="hello",trigger_kind="http",outcome="2xx"} 10
sless_invocations_total{namespace="default",function="hello",trigger_kind="http",outcome="timeout"} 1
sless_invocations_total{namespace="default",function="quiet",trigger_kind="cron",outcome="2xx"} 50
# TYPE sless_invocation_cold_starts_total counter
sless_invocation_cold_starts_total{namespace="default",function="hello"} 1
# TYPE sless_invocation_duration_seconds histogram
sless_invocation_duration_seconds_bucket{namespace="default",function="hello",le="0.1"} 5
sless_invocation_duration_seconds_bucket{namespace="default",function="hello",le="1"} 10
sless_invocation_duration_seconds_bucket{namespace="default",function="hello",le="+Inf"} 11
sless_invocation_duration_seconds_sum{namespace="default",function="hello"} 4
sless_invocation_duration_seconds_count{namespace="default",function="hello"} 11
`

const topAfter = `
# TYPE sless_invocations_total counter
sless_invocations_total{namespace="default",function="hello",trigger_kind="http",outcome="2xx"} 28
sless_invocations_total{namespace="default",function="hello",trigger_kind="http",outcome="timeout"} 2
sless_invocations_total{namespace="default",function="hello",trigger_kind="rabbitmq",outcome="5xx"} 1
sless_invocations_total{namespace="default",function="quiet",trigger_kind="cron",outcome="2xx"} 50
# TYPE sless_invocation_cold_starts_total counter
sless_invocation_cold_starts_total{namespace="default",function="hello"} 3
# TYPE sless_invocation_duration_seconds histogram
sless_invocation_duration_seconds_bucket{namespace="default",function="hello",le="0.1"} 6
sless_invocation_duration_seconds_bucket{namespace="default",function="hello",le="1"} 20
sless_invocation_duration_seconds_bucket{namespace="default",function="hello",le="+Inf"} 31
sless_invocation_duration_seconds_sum{namespace="default",function="hello"} 40
sless_invocation_duration_seconds_count{namespace="default",function="hello"} 31
# TYPE sless_instances gauge
sless_instances{namespace="default",function="hello",state="busy"} 2
sless_instances{namespace="default",function="hello",state="idle"} 1
sless_instances{namespace="default",function="hello",state="starting"} 0
# TYPE sless_invocations_queued gauge
sless_invocations_queued{namespace="default",function="hello"} 4
`

// TestTopRows: the rates are the increases over the interval, the busiest
// function first, the quantiles those of the interval's observations.
func TestTopRows(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	before, err := parseTop([]byte(topBefore), at)
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseTop([]byte(topAfter), at.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rows := topRows(before, after)
	if len(rows) != 2 || rows[0].Function != "hello" || rows[1].Function != "quiet" {
		t.Fatalf("rows %+v, want hello then quiet", rows)
	}
	h := rows[0]
	// 20 more invocations in 2 s, 2 of them errors (a timeout, a 5xx).
	checks := []struct {
		name      string
		got, want float64
	}{
		{"rate", h.Rate, 10}, {"error rate", h.ErrorRate, 1}, {"error ratio", h.ErrorRatio, 0.1},
		{"cold starts/s", h.ColdStartsPerSec, 1}, {"total", h.Invocations, 31}, {"errors", h.Errors, 3},
		// 20 observations in the window: 1 under 0.1, 9 in (0.1, 1], 10 above 1.
		{"p50", h.P50Seconds, 0.1 + 0.9*(10-1)/9}, {"p99", h.P99Seconds, 1},
		{"busy", float64(h.Busy), 2}, {"queued", float64(h.Queued), 4},
		{"quiet's rate", rows[1].Rate, 0},
	}
	for _, c := range checks {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	var out bytes.Buffer
	renderTop(&out, rows)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "default/hello ") || !strings.Contains(lines[2], " -  ") {
		t.Errorf("table:\n%s\nwant a header, hello, then quiet without latencies", out.String())
	}
}

// TestQuantile matches PromQL's histogram_quantile.
func TestQuantile(t *testing.T) {
	b := map[float64]float64{.1: 1, 1: 3, math.Inf(1): 4}
	for _, tc := range []struct{ q, want float64 }{{0.5, 0.55}, {0.25, 0.1}, {0.9, 1}} {
		if got := quantile(tc.q, b); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
}
