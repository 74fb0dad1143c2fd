package proxy

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke"
)

// refusals counts the /fn invocations refused at capacity and records one
// summary record per function and window instead of one record each: a
// refusal then costs no database row, and an overload leaves the capacity
// to the invocations that got it. The summary record has status 503, no
// method or path, the window as its start and duration, and the count in
// its error. Refused responses carry no invocation id.
//
// Refusals are also paced: a refused request is answered after a pause
// that grows with the refusals waiting out theirs, so that clients that
// retry at once get their refusals at about maxRefusalRate per second
// between them. They would otherwise keep the server's CPU busy refusing,
// and the admitted invocations' responses would wait behind them for the
// CPU (with 2 instances at 256 connections, goodput fell to a sixth of
// what 64 connections got).
type refusals struct {
	ledger invoke.Ledger
	window time.Duration
	// paced is how many refusals wait out their pause now; beyond
	// maxPaced they are answered at once, so that a flood of distinct
	// clients does not pile up waiting requests.
	paced atomic.Int64

	mu   sync.Mutex
	open map[functions.Key]*refusalWindow
}

// Pacing of refusals: the shortest and the longest pause before a refusal
// is answered, the rate of refusals the pause aims at, and how many
// refusals may wait at once.
const (
	minRefusalPace = 100 * time.Millisecond
	maxRefusalPace = time.Second
	maxRefusalRate = 500
	maxPaced       = 4096
)

// refusalPace is the pause of a refusal while n refusals wait out theirs:
// n clients that retry at once then get n/pause refusals a second, at most
// maxRefusalRate while the pause is within its bounds.
func refusalPace(n int64) time.Duration {
	return min(max(time.Duration(n)*time.Second/maxRefusalRate, minRefusalPace), maxRefusalPace)
}

// pace waits out a refusal's pause, unless maxPaced refusals wait already.
// It does not watch for the client going away: a refusal's pause is
// bounded and cheap, and watching the connection costs a goroutine and
// system calls per refusal.
func (r *refusals) pace() {
	defer r.paced.Add(-1)
	n := r.paced.Add(1)
	if n > maxPaced {
		return
	}
	time.Sleep(refusalPace(n))
}

// refusalWindow counts one function's refusals from start; the ledger gets
// its record when the window closes.
type refusalWindow struct {
	start time.Time
	count int
	timer *time.Timer // closes the window
}

func newRefusals(ledger invoke.Ledger, window time.Duration) *refusals {
	return &refusals{ledger: ledger, window: window, open: map[functions.Key]*refusalWindow{}}
}

// add counts one refusal of the function, opening its window when none is.
func (r *refusals) add(ns, name string) {
	k := functions.Key{Namespace: ns, Name: name}
	r.mu.Lock()
	w, ok := r.open[k]
	if !ok {
		w = &refusalWindow{start: time.Now()}
		r.open[k] = w
		w.timer = time.AfterFunc(r.window, func() { r.close(k, w) })
	}
	w.count++
	r.mu.Unlock()
}

// close records the summary of k's window w and forgets it, unless flush
// took it already.
func (r *refusals) close(k functions.Key, w *refusalWindow) {
	r.mu.Lock()
	if r.open[k] != w {
		r.mu.Unlock()
		return
	}
	delete(r.open, k)
	r.mu.Unlock()
	r.record(k, w)
}

// flush records the summaries of the open windows now: the server stops,
// and the ledger stops after it.
func (r *refusals) flush() {
	r.mu.Lock()
	open := r.open
	r.open = map[functions.Key]*refusalWindow{}
	r.mu.Unlock()
	for k, w := range open {
		w.timer.Stop()
		r.record(k, w)
	}
}

// record writes the summary record of k's window w, which ends now.
func (r *refusals) record(k functions.Key, w *refusalWindow) {
	end := time.Now()
	r.ledger.Record(&invoke.Record{
		ID: uuid.Must(uuid.NewV7()).String(), Namespace: k.Namespace, Function: k.Name, TriggerKind: invoke.KindHTTP,
		StartedAt: w.start.UTC(), DurationMS: ms(end.Sub(w.start)), StatusCode: http.StatusServiceUnavailable,
		Error: fmt.Sprintf("%d invocations on /fn refused at capacity between %s and %s (one record counts them all)",
			w.count, w.start.UTC().Format(time.RFC3339Nano), end.UTC().Format(time.RFC3339Nano)),
	})
}
