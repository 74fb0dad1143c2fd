package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"sless.kube5s.ru/sless/internal/procs"
	"sless.kube5s.ru/sless/modules/auth"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/invoke/proxy"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/server/front"
	"sless.kube5s.ru/sless/modules/server/httpx"
)

// fakeExecutor answers Acquire with acquireErr, or with a lease whose Do
// passes the invocation to sent, when set, and returns do's result.
type fakeExecutor struct {
	runtime.Instances // Warm is not used by the proxy
	acquireErr        error
	do                func(w http.ResponseWriter) (runtime.Result, error)
	sent              func(inv *runtime.Invocation)
}

func (f *fakeExecutor) Acquire(context.Context, functions.Key) (runtime.Lease, error) {
	if f.acquireErr != nil {
		return nil, f.acquireErr
	}
	return &fakeLease{f: f}, nil
}

type fakeLease struct{ f *fakeExecutor }

func (l *fakeLease) Target() *runtime.Target {
	return &runtime.Target{Namespace: "default", Name: "fn", Timeout: 3 * time.Second}
}
func (l *fakeLease) ColdStart() time.Duration { return 0 }
func (l *fakeLease) Release()                 {}
func (l *fakeLease) Do(_ context.Context, inv *runtime.Invocation, w http.ResponseWriter) (runtime.Result, error) {
	io.Copy(io.Discard, inv.Request.Body)
	if l.f.sent != nil {
		l.f.sent(inv)
	}
	return l.f.do(w)
}

// fakeLedger keeps what is recorded, unless discard; recording calls
// onRecord first, when set.
type fakeLedger struct {
	invoke.Ledger // List and Get are not used by the proxy
	discard       bool
	onRecord      func(*invoke.Record)
	mu            sync.Mutex
	records       []*invoke.Record
}

func (l *fakeLedger) Record(r *invoke.Record) {
	if l.onRecord != nil {
		l.onRecord(r)
	}
	if l.discard {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r)
}
func (l *fakeLedger) Begin(*invoke.Record) (func(), error) { return func() {}, nil }
func (l *fakeLedger) Accepting() error                     { return nil }

// fakeStore knows one function, "fn", in phase Building.
type fakeStore struct{ functions.Store }

func (fakeStore) Get(_ context.Context, k functions.Key) (*functions.Function, error) {
	if k.Name != "fn" {
		return nil, functions.ErrNotFound
	}
	return &functions.Function{Name: "fn", Namespace: "default",
		Status: functions.Status{Phase: "Building", Message: "installing dependencies"}}, nil
}

type public struct{}

func (public) Access(string, string) invoke.Access { return invoke.Access{Exposed: true} }

type noTokens struct{}

func (noTokens) Authenticate(context.Context, string) (auth.Principal, error) {
	return auth.Principal{}, auth.ErrUnauthenticated
}

func answer(status int, body string) func(w http.ResponseWriter) (runtime.Result, error) {
	return func(w http.ResponseWriter) (runtime.Result, error) {
		w.WriteHeader(status)
		io.WriteString(w, body)
		return runtime.Result{StatusCode: status, ResponseBytes: int64(len(body))}, nil
	}
}

func fail(err error) func(w http.ResponseWriter) (runtime.Result, error) {
	return func(http.ResponseWriter) (runtime.Result, error) { return runtime.Result{}, err }
}

// TestFnErrors is the table of what /fn answers and records for every
// outcome an executor can report.
func TestFnErrors(t *testing.T) {
	secret := errors.New("fork/exec /var/lib/sless/secret: permission denied")
	tests := []struct {
		name       string
		fn         string
		acquireErr error
		do         func(w http.ResponseWriter) (runtime.Result, error)
		wantStatus int
		// wantBody is the whole body; wantRecord the recorded status, 0
		// for nothing recorded.
		wantBody     string
		wantRecord   int
		wantRecError string
		retryAfter   bool
		// cut: the response fails after its head, so the client sees a
		// broken connection.
		cut bool
		// wantOutcome is the outcome the invocation is counted with, ""
		// for none (an unknown function is counted apart).
		wantOutcome string
	}{
		{name: "served", wantOutcome: "2xx", do: answer(201, "made"), wantStatus: 201, wantBody: "made", wantRecord: 201},
		{name: "handler error status passes through", wantOutcome: "5xx", do: answer(500, "oops"), wantStatus: 500, wantBody: "oops", wantRecord: 500},
		{name: "unknown function", wantOutcome: "", fn: "nope", acquireErr: runtime.ErrNotDeployed, wantStatus: 404,
			wantBody: `{"error":"function \"nope\" not found in namespace \"default\""}`},
		{name: "not deployed yet", wantOutcome: "unavailable", acquireErr: runtime.ErrNotDeployed, wantStatus: 503, wantRecord: 503,
			wantBody: `{"error":"function \"fn\" is not ready (phase Building: installing dependencies)"}`},
		{name: "at capacity is counted, not recorded", wantOutcome: "overloaded", acquireErr: runtime.ErrOverloaded, wantStatus: 503, retryAfter: true,
			wantBody: `{"error":"function \"fn\" is at capacity (max_instances and concurrency reached, and the wait queue is full or nothing freed up in time); retry later"}`},
		{name: "start failure says why, without the cause", wantOutcome: "crash",
			acquireErr: runtime.Errorf(runtime.ErrStart, "the handler \"main.handle\" could not be loaded: NameError: x", secret),
			wantStatus: 502, wantRecord: 502,
			wantBody: `{"error":"function failed to start: the handler \"main.handle\" could not be loaded: NameError: x"}`},
		{name: "a start that ends in Do fails like one in Acquire", wantOutcome: "crash",
			do:         fail(runtime.Errorf(runtime.ErrStart, "the handler \"main.handle\" could not be loaded: NameError: x", secret)),
			wantStatus: 502, wantRecord: 502,
			wantBody: `{"error":"function failed to start: the handler \"main.handle\" could not be loaded: NameError: x"}`},
		{name: "no instances in this mode says why, without the cause", wantOutcome: "unavailable",
			acquireErr: runtime.Errorf(runtime.ErrUnavailable, "invocations are not available in this mode yet", secret),
			wantStatus: 503, wantRecord: 503,
			wantBody: `{"error":"function \"fn\" cannot run: invocations are not available in this mode yet"}`},
		{name: "unclassified acquire failure is internal", wantOutcome: "error", acquireErr: secret, wantStatus: 500, wantRecord: 500,
			wantBody: `{"error":"internal error while starting the function; the server log has the details"}`},
		{name: "timeout", wantOutcome: "timeout", do: fail(runtime.ErrTimeout), wantStatus: 504, wantRecord: 504,
			wantBody: `{"error":"function \"fn\" timed out after 3s"}`},
		{name: "crash", wantOutcome: "crash", do: fail(runtime.Errorf(runtime.ErrCrashed, "exit status 7", secret)), wantStatus: 502, wantRecord: 502,
			wantBody: `{"error":"function \"fn\" crashed: exit status 7"}`},
		{name: "response too large", wantOutcome: "crash", do: fail(runtime.Errorf(runtime.ErrResponseTooLarge, "the body of 7.0 MiB exceeds the limit of 6.0 MiB", nil)),
			wantStatus: 502, wantRecord: 502,
			wantBody: `{"error":"function \"fn\" returned a response too large to pass on: the body of 7.0 MiB exceeds the limit of 6.0 MiB"}`},
		{name: "the instance's headers do not ride on the platform's error", wantOutcome: "crash",
			do: func(w http.ResponseWriter) (runtime.Result, error) {
				w.Header().Set("Cache-Control", "public, max-age=600")
				w.Header().Set("Set-Cookie", "session=abc")
				return runtime.Result{}, runtime.Errorf(runtime.ErrResponseTooLarge, "the body of 7.0 MiB exceeds the limit of 6.0 MiB", nil)
			},
			wantStatus: 502, wantRecord: 502,
			wantBody: `{"error":"function \"fn\" returned a response too large to pass on: the body of 7.0 MiB exceeds the limit of 6.0 MiB"}`},
		{name: "unclassified invocation failure is internal", wantOutcome: "error", do: fail(secret), wantStatus: 500, wantRecord: 500,
			wantBody: `{"error":"internal error while invoking the function; the server log has the details"}`},
		{name: "crash after the head is a 502 record and a cut connection", wantOutcome: "crash",
			do: func(w http.ResponseWriter) (runtime.Result, error) {
				w.WriteHeader(200)
				io.WriteString(w, "part")
				return runtime.Result{StatusCode: 200, Err: runtime.Errorf(runtime.ErrCrashed, "the response body ended after 4 of 10 bytes", nil)}, nil
			},
			cut: true, wantRecord: 502, wantRecError: "the response was cut short: the response body ended after 4 of 10 bytes"},
	}
	gin.SetMode(gin.TestMode)
	for _, via := range []string{"gin", "front"} {
		for _, tc := range tests {
			t.Run(via+"/"+tc.name, func(t *testing.T) {
				exec := &fakeExecutor{acquireErr: tc.acquireErr, do: tc.do}
				ledger := &fakeLedger{}
				p := proxy.New(proxy.Config{}, exec, fakeStore{}, ledger, public{}, noTokens{}, slog.New(slog.DiscardHandler))
				fn := tc.fn
				if fn == "" {
					fn = "fn"
				}
				resp, err := http.Post(serve(t, p, via)+"/fn/default/"+fn, "application/json", strings.NewReader(`{}`))
				var body []byte
				if err == nil {
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				if tc.cut {
					// The client must see a failure, never a short body that
					// looks complete; the record says what happened.
					if err == nil {
						t.Fatalf("the cut response read as complete: %d %s", resp.StatusCode, body)
					}
					checkRecord(t, ledger, "", tc.wantRecord, tc.wantRecError)
					checkOutcome(t, p, tc.wantOutcome)
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != tc.wantStatus || string(body) != tc.wantBody {
					t.Errorf("got %d %s, want %d %s", resp.StatusCode, body, tc.wantStatus, tc.wantBody)
				}
				for _, k := range []string{"Cache-Control", "Set-Cookie"} {
					if v := resp.Header.Get(k); v != "" {
						t.Errorf("the platform's %d carries the function's %s: %s", tc.wantStatus, k, v)
					}
				}
				if got := resp.Header.Get("Retry-After") != ""; got != tc.retryAfter {
					t.Errorf("Retry-After present = %v, want %v", got, tc.retryAfter)
				}
				id := resp.Header.Get("X-Sless-Invocation-Id")
				if tc.wantRecord == 0 {
					if id != "" {
						t.Errorf("answered invocation id %q, which is never recorded", id)
					}
				} else if id == "" {
					t.Errorf("no invocation id answered")
				}
				wantErr := ""
				if tc.wantStatus >= 500 {
					var e struct{ Error string }
					json.Unmarshal(body, &e)
					wantErr = e.Error
				}
				checkRecord(t, ledger, id, tc.wantRecord, wantErr)
				checkOutcome(t, p, tc.wantOutcome)
				if strings.Contains(string(body), "/var/lib") {
					t.Errorf("a server path reached the caller: %s", body)
				}
			})
		}
	}
}

// TestAnswerWholeOnlyAfterItsRecord: however long a body of declared
// length, the client has all of it only once the invocation's record is
// appended; a crash in between would lose the record of an answer.
func TestAnswerWholeOnlyAfterItsRecord(t *testing.T) {
	body := strings.Repeat("x", 64<<10)
	for _, via := range []string{"gin", "front"} {
		t.Run(via, func(t *testing.T) {
			exec := &fakeExecutor{do: func(w http.ResponseWriter) (runtime.Result, error) {
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				// In the pieces the wire copies.
				for i := 0; i < len(body); i += 32 << 10 {
					io.WriteString(w, body[i:i+32<<10])
				}
				return runtime.Result{StatusCode: 200, ResponseBytes: int64(len(body))}, nil
			}}
			var (
				// The client's connection, handed to the record by a channel:
				// the race detector does not count the request's way over a
				// socket as synchronization.
				client   = make(chan net.Conn, 1)
				recorded = make(chan struct{})
				got      = make([]byte, len(body))
				atRecord int
				resp     *http.Response
				br       *bufio.Reader
				err      error
			)
			ledger := &fakeLedger{onRecord: func(*invoke.Record) {
				defer close(recorded)
				conn := <-client
				br = bufio.NewReader(conn)
				// Whatever was sent by now arrives well within the deadline.
				conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
				if resp, err = http.ReadResponse(br, nil); err == nil {
					atRecord, err = io.ReadFull(resp.Body, got)
				}
			}}
			p := proxy.New(proxy.Config{}, exec, fakeStore{}, ledger, public{}, noTokens{}, slog.New(slog.DiscardHandler))
			conn, err := net.Dial("tcp", strings.TrimPrefix(serve(t, p, via), "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client <- conn
			io.WriteString(conn, "GET /fn/default/fn HTTP/1.1\r\nHost: x\r\n\r\n")
			select {
			case <-recorded:
			case <-time.After(10 * time.Second):
				t.Fatal("the invocation was not recorded")
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) || atRecord == len(body) {
				t.Fatalf("at the record, the client had %d of %d bytes (%v), want the body without its end", atRecord, len(body), err)
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(resp.Body, got[atRecord:]); err != nil || string(got) != body {
				t.Fatalf("after the record: %v, body intact %v", err, string(got) == body)
			}
		})
	}
}

// TestForwardedHeaders: the function learns who called and how, on the
// front and on gin alike: the client's address ends X-Forwarded-For, and
// X-Forwarded-Host is the Host the client asked for unless a proxy in front
// said it first; X-Forwarded-Proto passes as the proxy set it.
func TestForwardedHeaders(t *testing.T) {
	tests := []struct {
		name, head string
		want       map[string][]string
	}{
		{name: "a client calling the server", head: "Host: fn.example:8080\r\n",
			want: map[string][]string{"X-Forwarded-For": {"127.0.0.1"}, "X-Forwarded-Host": {"fn.example:8080"}, "X-Forwarded-Proto": nil}},
		{name: "behind proxies", head: "Host: internal\r\nX-Forwarded-For: 198.51.100.1, 203.0.113.7\r\n" +
			"x-forwarded-for: 192.0.2.1\r\nX-Forwarded-Host: fn.example\r\nX-Forwarded-Proto: https\r\n",
			want: map[string][]string{"X-Forwarded-For": {"198.51.100.1, 203.0.113.7, 192.0.2.1, 127.0.0.1"},
				"X-Forwarded-Host": {"fn.example"}, "X-Forwarded-Proto": {"https"}}},
	}
	for _, via := range []string{"gin", "front"} {
		for _, tt := range tests {
			t.Run(via+"/"+tt.name, func(t *testing.T) {
				got := make(chan http.Header, 1)
				exec := &fakeExecutor{do: answer(200, "ok"), sent: func(inv *runtime.Invocation) { got <- inv.Request.Header.Clone() }}
				p := proxy.New(proxy.Config{}, exec, fakeStore{}, &fakeLedger{}, public{}, noTokens{}, slog.New(slog.DiscardHandler))
				conn, err := net.Dial("tcp", strings.TrimPrefix(serve(t, p, via), "http://"))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				io.WriteString(conn, "GET /fn/default/fn HTTP/1.1\r\n"+tt.head+"\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("answer: %v %v", resp, err)
				}
				h := <-got
				for k, want := range tt.want {
					if fmt.Sprint(h[k]) != fmt.Sprint(want) {
						t.Errorf("%s: %q, want %q", k, h[k], want)
					}
				}
			})
		}
	}
}

// serve serves p's routes as the server does: via "gin" on the gin engine
// alone, via "front" on the server's front with gin behind it; it returns
// the base URL.
func serve(t *testing.T, p *proxy.Proxy, via string) string {
	t.Helper()
	engine := gin.New()
	p.Register(engine.Group("/v1"), engine)
	if via == "gin" {
		srv := httptest.NewServer(engine)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	f := front.New(front.Config{Routes: []httpx.FastRoute{p}, Fallback: &http.Server{Handler: engine}, Log: slog.New(slog.DiscardHandler)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go f.Serve(ln)
	t.Cleanup(func() { f.Shutdown(context.Background()) })
	return "http://" + ln.Addr().String()
}

// TestFastRoute: the front serves /fn when gin would take the same
// namespace and name from the path.
func TestFastRoute(t *testing.T) {
	p := proxy.New(proxy.Config{}, &fakeExecutor{}, fakeStore{}, &fakeLedger{}, public{}, noTokens{}, slog.New(slog.DiscardHandler))
	for path, want := range map[string]string{
		"/fn/default/hello":         "/fn/:ns/:name",
		"/fn/default/hello/":        "/fn/:ns/:name/*path",
		"/fn/default/hello/a/b%2Fc": "/fn/:ns/:name/*path",
		"/fn/default/hel%6Co":       "",
		"/fn/def%61ult/hello":       "",
		"/fn/default/":              "",
		"/fn/default":               "",
		"/fn//hello":                "",
		"/fn/":                      "",
		"/v1/whoami":                "",
		"/fnx/a/b":                  "",
	} {
		if got := p.FastRoute(path); got != want {
			t.Errorf("FastRoute(%q) = %q, want %q", path, got, want)
		}
	}
}

// checkRecord fails t unless ledger holds one record with the id (any when
// ""), status and error, or none when status is 0.
func checkRecord(t *testing.T, ledger *fakeLedger, id string, status int, wantErr string) {
	t.Helper()
	ledger.mu.Lock()
	defer ledger.mu.Unlock()
	if status == 0 {
		if len(ledger.records) != 0 {
			t.Errorf("recorded %d records, want none", len(ledger.records))
		}
		return
	}
	if len(ledger.records) != 1 {
		t.Fatalf("recorded %d records, want 1", len(ledger.records))
	}
	rec := ledger.records[0]
	if rec.StatusCode != status || (id != "" && rec.ID != id) {
		t.Errorf("record %+v, want status %d and the answered id %q", rec, status, id)
	}
	if rec.Error != wantErr {
		t.Errorf("record error %q, want %q", rec.Error, wantErr)
	}
	if strings.Contains(rec.Error, "/var/lib") {
		t.Errorf("a server path reached the record: %s", rec.Error)
	}
}

// checkOutcome fails t unless p counted one invocation of default/fn over
// http, with outcome want, or, for "", one of an unknown function.
func checkOutcome(t *testing.T, p *proxy.Proxy, want string) {
	t.Helper()
	got := gather(t, p.Metrics())
	wantSeries := map[string]float64{"sless_invocations_not_found_total": 0}
	if want == "" {
		wantSeries["sless_invocations_not_found_total"] = 1
	} else {
		wantSeries[`sless_invocations_total{function="fn",namespace="default",outcome="`+want+`",trigger_kind="http"}`] = 1
	}
	for name, v := range got {
		if strings.HasPrefix(name, "sless_invocations_") && got[name] != wantSeries[name] {
			t.Errorf("%s = %v, want %v", name, v, wantSeries[name])
		}
	}
	for name, v := range wantSeries {
		if got[name] != v {
			t.Errorf("%s = %v, want %v", name, got[name], v)
		}
	}
}

// gather collects c and returns its counters and gauges by name and
// labels, and each histogram's count as name_count and sum as name_sum.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			series := f.GetName()
			if len(labels) > 0 {
				series += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[series] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[series] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				name, rest, _ := strings.Cut(series, "{")
				if rest != "" {
					rest = "{" + rest
				}
				out[name+"_count"+rest] = float64(m.GetHistogram().GetSampleCount())
				out[name+"_sum"+rest] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

// TestManyInvocationsInFlightRaiseTheServersCPUs: from 16 invocations in
// flight the proxy has the governor give the server every CPU, and lets go
// once they ended.
func TestManyInvocationsInFlightRaiseTheServersCPUs(t *testing.T) {
	prev := goruntime.GOMAXPROCS(1)
	t.Cleanup(func() { goruntime.GOMAXPROCS(prev) })
	started, release := make(chan struct{}), make(chan struct{})
	exec := &fakeExecutor{do: func(w http.ResponseWriter) (runtime.Result, error) {
		started <- struct{}{}
		<-release
		return answer(http.StatusOK, "ok")(w)
	}}
	p := proxy.New(proxy.Config{}, exec, fakeStore{}, &fakeLedger{discard: true}, public{}, noTokens{}, slog.New(slog.DiscardHandler))
	p.RaiseProcs(procs.New(1, 3, 10*time.Millisecond))

	var wg sync.WaitGroup
	startOne := func() {
		wg.Go(func() {
			if _, err := p.Invoke(context.Background(), invoke.Request{Namespace: "default", Function: "fn", TriggerKind: invoke.KindCLI}); err != nil {
				t.Error(err)
			}
		})
		<-started
	}
	for range 15 {
		startOne()
	}
	if got := goruntime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("GOMAXPROCS with 15 invocations in flight: %d; want 1", got)
	}
	startOne()
	if got := goruntime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("GOMAXPROCS with 16 invocations in flight: %d; want 3", got)
	}
	close(release)
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for goruntime.GOMAXPROCS(0) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("GOMAXPROCS after the invocations ended: %d; want 1", goruntime.GOMAXPROCS(0))
		}
		time.Sleep(time.Millisecond)
	}
}
