package proxy

import (
	"strings"
	"sync"
	"testing"
	"time"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke"
)

// recorder keeps what is recorded.
type recorder struct {
	invoke.Ledger
	mu      sync.Mutex
	records []*invoke.Record
}

func (l *recorder) Record(r *invoke.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r)
}

func (l *recorder) recorded() []*invoke.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*invoke.Record(nil), l.records...)
}

// TestFlushRecordsOpenWindows: the refusals counted when the server stops
// are recorded at once, before the ledger stops, and only once.
func TestFlushRecordsOpenWindows(t *testing.T) {
	l := &recorder{}
	r := newRefusals(l, time.Hour)
	r.add("ns", "a")
	r.add("ns", "a")
	r.add("ns", "b")
	a := functions.Key{Namespace: "ns", Name: "a"}
	windowA := r.open[a]
	r.flush()
	got := l.recorded()
	if len(got) != 2 {
		t.Fatalf("flush recorded %d summaries, want 2", len(got))
	}
	counts := map[string]string{}
	for _, rec := range got {
		counts[rec.Function], _, _ = strings.Cut(rec.Error, " ")
	}
	if counts["a"] != "2" || counts["b"] != "1" {
		t.Errorf("summaries count %v, want a: 2, b: 1", counts)
	}
	// A window's timer that fired as flush took the window records nothing.
	r.close(a, windowA)
	if n := len(l.recorded()); n != 2 {
		t.Errorf("%d summaries after the window's timer, want still 2", n)
	}
}

// TestWindowClosesOnItsOwn: without a flush, a window is recorded once
// when it ends.
func TestWindowClosesOnItsOwn(t *testing.T) {
	l := &recorder{}
	r := newRefusals(l, 10*time.Millisecond)
	r.add("ns", "a")
	deadline := time.Now().Add(5 * time.Second)
	for len(l.recorded()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	r.flush()
	if got := l.recorded(); len(got) != 1 || !strings.HasPrefix(got[0].Error, "1 invocations") {
		t.Errorf("recorded %d summaries (%v), want one counting 1", len(got), got)
	}
}

// TestRefusalPace: a refusal waits at least the shortest pause; as more
// wait, the pause grows so that their retries come at maxRefusalRate a
// second, up to the longest pause.
func TestRefusalPace(t *testing.T) {
	for _, tt := range []struct {
		waiting int64
		want    time.Duration
	}{
		{1, minRefusalPace},
		{50, minRefusalPace},
		{100, 200 * time.Millisecond},
		{154, 308 * time.Millisecond},
		{500, maxRefusalPace},
		{maxPaced, maxRefusalPace},
	} {
		if got := refusalPace(tt.waiting); got != tt.want {
			t.Errorf("refusalPace(%d) = %v, want %v", tt.waiting, got, tt.want)
		}
		if rate := float64(tt.waiting) / refusalPace(tt.waiting).Seconds(); rate > maxRefusalRate && refusalPace(tt.waiting) < maxRefusalPace {
			t.Errorf("%d waiting refusals come back at %.0f/s, more than %d/s", tt.waiting, rate, maxRefusalRate)
		}
	}
}
