package proxy

import (
	"math"
	"testing"
	"time"
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
