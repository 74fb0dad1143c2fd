package proxy_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke/proxy"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/tracing"
)

// traceExecutor's leases start cold and keep the traceparent each
// invocation was sent with.
type traceExecutor struct {
	runtime.Instances
	mu   sync.Mutex
	sent []string
}

func (e *traceExecutor) Acquire(context.Context, functions.Key) (runtime.Lease, error) {
	return &traceLease{e: e}, nil
}

type traceLease struct{ e *traceExecutor }

func (l *traceLease) Target() *runtime.Target {
	return &runtime.Target{Namespace: "default", Name: "fn", Timeout: 3 * time.Second}
}
func (l *traceLease) ColdStart() time.Duration { return 20 * time.Millisecond }
func (l *traceLease) Release()                 {}
func (l *traceLease) Do(_ context.Context, inv *runtime.Invocation, w http.ResponseWriter) (runtime.Result, error) {
	io.Copy(io.Discard, inv.Request.Body)
	l.e.mu.Lock()
	l.e.sent = append(l.e.sent, inv.Traceparent)
	l.e.mu.Unlock()
	w.WriteHeader(200)
	return runtime.Result{StatusCode: 200, Handler: 5 * time.Millisecond}, nil
}

// spans is a tracing.Exporter that samples what sample says and keeps
// what it is given.
type spans struct {
	sample bool
	mu     sync.Mutex
	got    []tracing.Span
}

func (s *spans) Sampled(tracing.TraceID) bool { return s.sample }
func (s *spans) Export(sp ...tracing.Span) {
	s.mu.Lock()
	s.got = append(s.got, sp...)
	s.mu.Unlock()
}

// TestTraceparent: /fn continues the caller's trace or starts one named
// by the invocation id, sends the handler a traceparent whose parent is
// the handler's span, records the trace id, and exports the spans of
// sampled invocations only.
func TestTraceparent(t *testing.T) {
	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	tests := []struct {
		name, header string
		sample       bool
		// wantTrace "" means the invocation id's hex digits.
		wantTrace  string
		wantFlags  string
		wantSpans  int
		wantParent string // of the invocation's span; "" for a root
	}{
		{name: "caller sampled", header: "00-" + callerTrace + "-00f067aa0ba902b7-01", wantTrace: callerTrace, wantFlags: "01",
			wantSpans: 4, wantParent: "00f067aa0ba902b7"},
		{name: "caller not sampled", header: "00-" + callerTrace + "-00f067aa0ba902b7-00", sample: true, wantTrace: callerTrace,
			wantFlags: "00"},
		{name: "no header, sampled here", sample: true, wantFlags: "01", wantSpans: 4},
		{name: "no header, not sampled", wantFlags: "00"},
		{name: "invalid header starts a trace", header: "00-" + strings.ToUpper(callerTrace) + "-00f067aa0ba902b7-01", wantFlags: "00"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			exec := &traceExecutor{}
			ledger := &fakeLedger{}
			exp := &spans{sample: tc.sample}
			p := proxy.New(proxy.Config{}, exec, fakeStore{}, ledger, public{}, noTokens{}, slog.New(slog.DiscardHandler))
			p.Trace(exp)
			req, _ := http.NewRequest("POST", serve(t, p, "front")+"/fn/default/fn", strings.NewReader(`{}`))
			if tc.header != "" {
				req.Header.Set("traceparent", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			id := resp.Header.Get("X-Sless-Invocation-Id")
			wantTrace := tc.wantTrace
			if wantTrace == "" {
				wantTrace = strings.ReplaceAll(id, "-", "")
			}
			// The response came over a socket, which the race detector does
			// not count as synchronization: what the server wrote is read
			// under the locks it wrote it with.
			ledger.mu.Lock()
			rec := ledger.records[0]
			ledger.mu.Unlock()
			exec.mu.Lock()
			sentTraceparent := exec.sent[0]
			exec.mu.Unlock()
			exp.mu.Lock()
			got := exp.got
			exp.mu.Unlock()
			if rec.TraceID != wantTrace {
				t.Errorf("recorded trace id %q, want %q", rec.TraceID, wantTrace)
			}
			sent, ok := tracing.Parse(sentTraceparent)
			if !ok || sent.TraceID.String() != wantTrace || sentTraceparent[53:] != tc.wantFlags {
				t.Errorf("the handler got traceparent %q, want trace %s with flags %s", sentTraceparent, wantTrace, tc.wantFlags)
			}
			if len(got) != tc.wantSpans {
				t.Fatalf("exported %d spans, want %d", len(got), tc.wantSpans)
			}
			if tc.wantSpans == 0 {
				return
			}
			byName := map[string]tracing.Span{}
			for _, s := range got {
				byName[strings.Fields(s.Name)[0]] = s
				if s.TraceID.String() != wantTrace {
					t.Errorf("span %q in trace %s, want %s", s.Name, s.TraceID, wantTrace)
				}
			}
			inv := byName["invoke"]
			if got := inv.Parent.String(); (tc.wantParent == "" && inv.Parent != tracing.SpanID{}) || (tc.wantParent != "" && got != tc.wantParent) {
				t.Errorf("invocation span's parent %s, want %q", got, tc.wantParent)
			}
			if got, want := inv.SpanID.String(), strings.ReplaceAll(id, "-", "")[16:]; got != want {
				t.Errorf("invocation span id %s, want the invocation id's last 16 digits %s", got, want)
			}
			for _, name := range []string{"queue", "cold", "handler"} {
				if s, ok := byName[name]; !ok || s.Parent != inv.SpanID {
					t.Errorf("span %s: %+v, want a child of the invocation's span", name, s)
				}
			}
			if got := byName["handler"].SpanID; got != sent.SpanID {
				t.Errorf("handler span %s, but the handler was told its parent is %s", got, sent.SpanID)
			}
			if d := byName["cold"].End.Sub(byName["cold"].Start); d != 20*time.Millisecond {
				t.Errorf("cold start span lasts %s, want 20ms", d)
			}
		})
	}
}
