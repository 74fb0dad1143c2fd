package proxy

import (
	"math"
	"testing"
	"time"

	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/meta"
)

func TestWindowCountsTheLastHour(t *testing.T) {
	var w window
	t0 := time.Date(2026, 1, 2, 10, 0, 30, 0, time.UTC)
	// An hour and a minute ago: outside the window by now.
	w.observe(t0, outcome2xx, 5*time.Millisecond, true, true)
	now := t0.Add(61 * time.Minute)
	for i := range 98 {
		w.observe(now.Add(-time.Duration(i)*20*time.Second), outcome2xx, 20*time.Millisecond, false, true)
	}
	w.observe(now.Add(-59*time.Minute), outcomeTimeout, 30*time.Second, true, true)
	w.observe(now, outcomeOverloaded, 0, false, false)
	w.observe(now, outcome4xx, 20*time.Millisecond, false, true)

	st := w.stats(now)
	if st.Invocations != 101 || st.Errors != 2 || st.ColdStarts != 1 || st.WindowSeconds != 3600 {
		t.Errorf("got %d invocations, %d errors, %d cold starts over %d s; want 101, 2, 1 over 3600",
			st.Invocations, st.Errors, st.ColdStarts, st.WindowSeconds)
	}
	if want := 101.0 / 3600; math.Abs(st.RatePerSecond-want) > 1e-12 {
		t.Errorf("rate %v, want %v", st.RatePerSecond, want)
	}
	// 99 of the 100 that ran took 20 ms (bucket 10-25 ms), one 30 s.
	if st.P50MS < 10 || st.P50MS > 25 {
		t.Errorf("p50 %v ms, want within the 10-25 ms bucket", st.P50MS)
	}
	if st.P99MS < 10 || st.P99MS > 25 {
		t.Errorf("p99 %v ms, want within the 10-25 ms bucket (99 of 100 are there)", st.P99MS)
	}
	// An hour later nothing is left, and the reused slots start from 0.
	later := now.Add(time.Hour)
	if st := w.stats(later); st.Invocations != 0 || st.P50MS != 0 {
		t.Errorf("an hour later: %+v, want nothing", st)
	}
	w.observe(later, outcome5xx, time.Second, false, true)
	if st := w.stats(later); st.Invocations != 1 || st.Errors != 1 {
		t.Errorf("after a reuse of the slot: %d invocations, %d errors; want 1, 1", st.Invocations, st.Errors)
	}
}

func TestQuantile(t *testing.T) {
	buckets := make([]uint64, len(durationBuckets)+1)
	if q := quantile(0.5, buckets); q != 0 {
		t.Errorf("no observations: %v, want 0", q)
	}
	buckets[0] = 10 // 10 at most 1 ms
	buckets[1] = 10 // 10 within 1-2.5 ms
	for _, c := range []struct{ q, want float64 }{{0.25, 0.0005}, {0.5, 0.001}, {0.75, 0.00175}, {1, 0.0025}} {
		if got := quantile(c.q, buckets); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	buckets[len(buckets)-1] = 1000 // beyond the last bound
	if got := quantile(0.99, buckets); got != 900 {
		t.Errorf("quantile in +Inf: %v, want the last bound 900", got)
	}
}

// TestNamespaceStats: observe feeds the window; the stats of a namespace
// are its functions' with invocations in the hour, by name, and a refusal
// at capacity is an error without a duration.
func TestNamespaceStats(t *testing.T) {
	m := newMetrics()
	now := time.Now()
	call := func(ns, name string, status int, refusal outcome, cold bool) {
		c := &call{ns: ns, name: name, kind: invoke.KindHTTP, leased: refusal == outcomeNone, refusal: refusal}
		rec := &invoke.Record{StatusCode: status, StartedAt: now.Add(-time.Second), ColdStart: cold, ColdStartMS: 30}
		m.observe(m.lookup(meta.Key{Namespace: ns, Name: name}), c, rec, 2*time.Millisecond)
	}
	call("default", "zeta", 200, outcomeNone, true)
	call("default", "alpha", 200, outcomeNone, false)
	call("default", "alpha", 500, outcomeNone, false)
	call("default", "alpha", 0, outcomeOverloaded, false)
	call("other", "alpha", 200, outcomeNone, false)
	m.create(meta.Key{Namespace: "default", Name: "idle"})

	got := m.namespaceStats("default", now)
	if len(got) != 2 || got[0].Function != "alpha" || got[1].Function != "zeta" {
		t.Fatalf("stats of default: %+v; want alpha and zeta, by name", got)
	}
	if a := got[0]; a.Invocations != 3 || a.Errors != 2 || a.ColdStarts != 0 || a.P50MS <= 1 || a.P50MS > 2.5 {
		t.Errorf("alpha: %+v; want 3 invocations, 2 errors (the 500 and the refusal), p50 within 1-2.5 ms", a)
	}
	if z := got[1]; z.Invocations != 1 || z.Errors != 0 || z.ColdStarts != 1 {
		t.Errorf("zeta: %+v; want 1 invocation, a cold start", z)
	}
	if got := m.namespaceStats("nobody", now); got == nil || len(got) != 0 {
		t.Errorf("stats of an empty namespace: %#v; want an empty list", got)
	}
}
