package front_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"sless.kube5s.ru/sless/modules/server/front"
	"sless.kube5s.ru/sless/modules/server/httpx"
)

// route serves /fn/... with h on the front; abort is what ServeFast
// returns when the request has an X-Abort header.
type route struct{ h http.Handler }

func (route) FastRoute(path string) string {
	if strings.HasPrefix(path, "/fn/") {
		return "/fn/*"
	}
	return ""
}

func (r route) ServeFast(w http.ResponseWriter, req *http.Request) bool {
	r.h.ServeHTTP(w, req)
	return req.Header.Get("X-Abort") != ""
}

// observed records the front's Observe calls.
type observed struct {
	mu    sync.Mutex
	calls []string
}

func (o *observed) observe(route, method string, code int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, fmt.Sprintf("%s %s %d", method, route, code))
}

func (o *observed) get() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.calls...)
}

type setup struct {
	addr     string
	front    *front.Front
	observed *observed
}

// start serves h on a front: /fn/... on its fast route, everything else on
// the fallback server, whose handler answers with "fallback <path>" (and
// serves /fn/... with h too, marked by an X-Served-By header).
func start(t *testing.T, h http.Handler, tune func(*http.Server)) *setup {
	t.Helper()
	fallback := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Served-By", "net/http")
			if strings.HasPrefix(r.URL.Path, "/fn/") {
				h.ServeHTTP(w, r)
				return
			}
			io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "fallback %s", r.URL.Path)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
	}
	if tune != nil {
		tune(fallback)
	}
	o := &observed{}
	f := front.New(front.Config{Routes: []httpx.FastRoute{route{h}}, Fallback: fallback, Observe: o.observe,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- f.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := f.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return &setup{addr: ln.Addr().String(), front: f, observed: o}
}

// client is a raw connection to the server.
type client struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &client{t: t, c: c, br: bufio.NewReader(c)}
}

func (c *client) send(raw string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, raw); err != nil {
		c.t.Fatal(err)
	}
}

// response reads one response to a request of method.
func (c *client) response(method string) *response {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("reading the response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	return &response{Response: resp, body: string(body), bodyErr: err}
}

// closed reports whether the server closed the connection (EOF before any
// further byte).
func (c *client) closed() bool {
	c.t.Helper()
	_, err := c.br.ReadByte()
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err)
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "connection reset") }

type response struct {
	*http.Response
	body    string
	bodyErr error
}

// summary is what a client can tell of a response, Date aside.
func (r *response) summary() string {
	h := r.Header.Clone()
	h.Del("Date")
	h.Del("X-Served-By")
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", r.Proto, r.Status)
	h.Write(&b)
	fmt.Fprintf(&b, "te=%v cl=%d close=%v\n%s", r.TransferEncoding, r.ContentLength, r.Close, r.body)
	if r.bodyErr != nil {
		fmt.Fprintf(&b, "\nbody error: %v", r.bodyErr)
	}
	return b.String()
}

// echo is the handler behind /fn in most tests: its path picks what it
// does.
func echo(w http.ResponseWriter, r *http.Request) {
	switch strings.TrimPrefix(r.URL.Path, "/fn/") {
	case "small":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	case "sniff":
		io.WriteString(w, "<html><body>hi</body></html>")
	case "large":
		w.Header().Set("Content-Type", "text/plain")
		for range 10 {
			io.WriteString(w, strings.Repeat("x", 1000))
		}
	case "length":
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "hello")
	case "empty":
	case "nocontent":
		w.WriteHeader(http.StatusNoContent)
	case "notmodified":
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusNotModified)
	case "status":
		w.WriteHeader(599)
		io.WriteString(w, "odd")
	case "echo":
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, err.Error())
			return
		}
		fmt.Fprintf(w, "%s %s %q len=%d te=%v", r.Method, r.RequestURI, b, r.ContentLength, r.TransferEncoding)
	case "unread":
		io.WriteString(w, "did not read")
	case "headers":
		fmt.Fprintf(w, "host=%s ua=%q x=%q close=%v", r.Host, r.Header.Get("User-Agent"), r.Header["X-Multi"], r.Close)
	case "newline":
		w.Header().Set("X-Bad", "a\r\nb")
		io.WriteString(w, "ok")
	case "partial":
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, strings.Repeat("y", 3000))
	case "panic":
		panic("boom")
	default:
		http.NotFound(w, r)
	}
}

// TestFramingMatchesNetHTTP sends the same requests to the front and to a
// plain net/http server serving the same handler: the responses must be
// the same, Date aside, and so must be whether the connection stays open.
func TestFramingMatchesNetHTTP(t *testing.T) {
	cases := []struct {
		name, method, raw string
	}{
		{"small body gets a length", "GET", "GET /fn/small HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"content type sniffed", "GET", "GET /fn/sniff HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"large body is chunked", "GET", "GET /fn/large HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"declared length", "GET", "GET /fn/length HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"empty body", "GET", "GET /fn/empty HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"204", "GET", "GET /fn/nocontent HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"304", "GET", "GET /fn/notmodified HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"unknown status", "GET", "GET /fn/status HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"HEAD without a length", "HEAD", "HEAD /fn/small HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"HEAD with a length", "HEAD", "HEAD /fn/length HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"HEAD of a large body", "HEAD", "HEAD /fn/large HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"body with a length", "POST", "POST /fn/echo?a=1&b=%20 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"},
		{"chunked body and trailer", "POST",
			"POST /fn/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n"},
		{"malformed chunked body", "POST", "POST /fn/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n"},
		{"unread small body is drained", "POST", "POST /fn/unread HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"},
		{"unread large body closes", "POST",
			"POST /fn/unread HTTP/1.1\r\nHost: x\r\nContent-Length: 400000\r\n\r\n" + strings.Repeat("z", 400000)},
		{"client asks to close", "GET", "GET /fn/small HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"},
		{"headers", "GET", "GET /fn/headers HTTP/1.1\r\nhost: h.example\r\nUser-Agent: t\r\nx-multi: 1\r\nX-Multi:  2 \r\n\r\n"},
		{"line break in a header value", "GET", "GET /fn/newline HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"not found", "GET", "GET /fn/none HTTP/1.1\r\nHost: x\r\n\r\n"},
	}
	fast := start(t, http.HandlerFunc(echo), nil)
	plain := httptest.NewServer(http.HandlerFunc(echo))
	t.Cleanup(plain.Close)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]string
			for i, addr := range []string{fast.addr, plain.Listener.Addr().String()} {
				c := dial(t, addr)
				c.send(tc.raw)
				r := c.response(tc.method)
				if r.Header.Get("X-Served-By") != "" {
					t.Fatalf("the front handed the request over")
				}
				if d, err := http.ParseTime(r.Header.Get("Date")); err != nil || time.Since(d) > time.Minute {
					t.Errorf("Date %q: %v", r.Header.Get("Date"), err)
				}
				got[i] = r.summary()
				if r.Close {
					got[i] += fmt.Sprintf("\nclosed=%v", c.closed())
					continue
				}
				// Still usable.
				c.send("GET /fn/small HTTP/1.1\r\nHost: x\r\n\r\n")
				if next := c.response("GET"); next.StatusCode != 200 {
					t.Errorf("the next request got %s", next.Status)
				}
			}
			if diff := cmp.Diff(got[1], got[0]); diff != "" {
				t.Errorf("front (+) differs from net/http (-):\n%s", diff)
			}
		})
	}
}

// TestHandOver: what the front does not serve goes, with the bytes read,
// to the fallback server, which keeps the connection.
func TestHandOver(t *testing.T) {
	cases := []struct {
		name, raw  string
		wantStatus int
		wantBody   string
	}{
		{"another path", "GET /v1/things HTTP/1.1\r\nHost: x\r\n\r\n", 200, "fallback /v1/things"},
		{"HTTP/1.0", "GET /fn/small HTTP/1.0\r\nHost: x\r\n\r\n", 200, `{"ok":true}`},
		{"no Host", "GET /fn/small HTTP/1.1\r\n\r\n", 400, ""},
		{"two Hosts", "GET /fn/small HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, ""},
		{"invalid header name", "GET /fn/small HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n", 400, ""},
		{"bare LF", "GET /fn/small HTTP/1.1\nHost: x\n\n", 200, `{"ok":true}`},
		{"unknown Expect", "GET /fn/small HTTP/1.1\r\nHost: x\r\nExpect: magic\r\n\r\n", 417, ""},
		{"length and chunked", "POST /fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			200, `POST /fn/echo "" len=-1 te=[chunked]`},
		{"unknown method", "PROPFIND /fn/small HTTP/1.1\r\nHost: x\r\n\r\n", 200, `{"ok":true}`},
		{"head larger than the buffer", "GET /fn/small HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 8000) + "\r\n\r\n",
			200, `{"ok":true}`},
	}
	s := start(t, http.HandlerFunc(echo), nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, s.addr)
			c.send(tc.raw)
			r := c.response("GET")
			if r.StatusCode != tc.wantStatus || tc.wantBody != "" && r.body != tc.wantBody {
				t.Fatalf("got %s %q, want %d %q", r.Status, r.body, tc.wantStatus, tc.wantBody)
			}
			if r.Header.Get("X-Served-By") == "" && r.StatusCode == 200 {
				t.Errorf("served by the front, want net/http")
			}
			if r.Close {
				return
			}
			// The fallback keeps the connection, /fn included.
			c.send("GET /fn/small HTTP/1.1\r\nHost: x\r\n\r\n")
			if next := c.response("GET"); next.StatusCode != 200 || next.Header.Get("X-Served-By") == "" {
				t.Errorf("next /fn request: got %s served by %q, want 200 from net/http", next.Status, next.Header.Get("X-Served-By"))
			}
		})
	}
}

// TestKeepAliveAndPipelining: requests on one connection, sent one by one
// or all at once, are answered in order by the front, then by the fallback
// once a request of its own comes.
func TestKeepAliveAndPipelining(t *testing.T) {
	s := start(t, http.HandlerFunc(echo), nil)
	c := dial(t, s.addr)
	c.send("GET /fn/echo?n=1 HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := c.response("GET"); r.body != `GET /fn/echo?n=1 "" len=0 te=[]` {
		t.Fatalf("first: got %q", r.body)
	}
	c.send("GET /fn/echo?n=2 HTTP/1.1\r\nHost: x\r\n\r\nPOST /fn/echo?n=3 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab" +
		"GET /api HTTP/1.1\r\nHost: x\r\n\r\nGET /fn/echo?n=4 HTTP/1.1\r\nHost: x\r\n\r\n")
	want := []struct{ body, by string }{
		{`GET /fn/echo?n=2 "" len=0 te=[]`, ""},
		{`POST /fn/echo?n=3 "ab" len=2 te=[]`, ""},
		{"fallback /api", "net/http"},
		{`GET /fn/echo?n=4 "" len=0 te=[]`, "net/http"},
	}
	for i, w := range want {
		r := c.response("GET")
		if r.body != w.body || r.Header.Get("X-Served-By") != w.by {
			t.Errorf("response %d: got %q by %q, want %q by %q", i, r.body, r.Header.Get("X-Served-By"), w.body, w.by)
		}
	}
	wantCalls := []string{"GET /fn/* 200", "GET /fn/* 200", "POST /fn/* 200"}
	if diff := cmp.Diff(wantCalls, s.observed.get()); diff != "" {
		t.Errorf("observed (-want +got):\n%s", diff)
	}
}

// TestExpectContinue: 100 Continue goes out when the handler reads the
// body; a handler that does not read it closes the connection instead.
func TestExpectContinue(t *testing.T) {
	s := start(t, http.HandlerFunc(echo), nil)
	c := dial(t, s.addr)
	c.send("POST /fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
	line, err := c.br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("got %q, %v, want a 100 Continue", line, err)
	}
	if blank, _ := c.br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("got %q after the 100 Continue", blank)
	}
	c.send("body")
	if r := c.response("POST"); r.body != `POST /fn/echo "body" len=4 te=[]` {
		t.Fatalf("got %q", r.body)
	}

	c.send("POST /fn/unread HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
	r := c.response("POST")
	if r.StatusCode != 200 || !r.Close {
		t.Fatalf("unread body: got %s close=%v, want 200 and Connection: close", r.Status, r.Close)
	}
	if !c.closed() {
		t.Errorf("the connection stayed open")
	}
}

// TestAbortAndPanic: an aborted response ends by closing the connection,
// without the last chunk; a panic before the head is a 500.
func TestAbortAndPanic(t *testing.T) {
	s := start(t, http.HandlerFunc(echo), nil)
	c := dial(t, s.addr)
	c.send("GET /fn/partial HTTP/1.1\r\nHost: x\r\nX-Abort: 1\r\n\r\n")
	r := c.response("GET")
	if r.StatusCode != 200 || r.bodyErr == nil {
		t.Errorf("aborted: got %s, body error %v, want 200 and a cut body", r.Status, r.bodyErr)
	}

	c = dial(t, s.addr)
	c.send("GET /fn/panic HTTP/1.1\r\nHost: x\r\n\r\n")
	r = c.response("GET")
	if want := `{"error":"internal server error; the server log has the details"}`; r.StatusCode != 500 || r.body != want {
		t.Errorf("panic: got %s %q, want 500 %q", r.Status, r.body, want)
	}
	if got := s.observed.get(); len(got) != 0 {
		t.Errorf("observed %v; aborted and panicked requests are not observed, as in gin", got)
	}
}

// TestTimeouts: a head that does not arrive within ReadHeaderTimeout and an
// idle connection past IdleTimeout are closed without an answer.
func TestTimeouts(t *testing.T) {
	s := start(t, http.HandlerFunc(echo), func(srv *http.Server) {
		srv.ReadHeaderTimeout = 100 * time.Millisecond
		srv.IdleTimeout = 200 * time.Millisecond
	})
	c := dial(t, s.addr)
	c.send("GET /fn/small HTTP/1.1\r\nHo")
	began := time.Now()
	if !c.closed() {
		t.Fatalf("a slow head was not cut")
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("closed after %s", d)
	}

	c = dial(t, s.addr)
	c.send("GET /fn/small HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := c.response("GET"); r.StatusCode != 200 {
		t.Fatalf("got %s", r.Status)
	}
	if !c.closed() {
		t.Errorf("an idle connection was not closed")
	}
}

// TestClientGone: a handler waiting on its request's context sees the
// client close the connection.
func TestClientGone(t *testing.T) {
	waiting := make(chan struct{})
	cancelled := make(chan error, 1)
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Err() != nil {
			t.Errorf("cancelled before the client left: %v", r.Context().Err())
		}
		done := r.Context().Done()
		close(waiting)
		select {
		case <-done:
			cancelled <- r.Context().Err()
		case <-time.After(10 * time.Second):
			cancelled <- errors.New("not cancelled")
		}
	}), nil)
	c := dial(t, s.addr)
	c.send("GET /fn/wait HTTP/1.1\r\nHost: x\r\n\r\n")
	<-waiting
	c.c.Close()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

// TestPipelinedRequestAfterWatch: the next request, pipelined while a
// handler watches its connection (the watch read may take its first byte),
// is answered whole, and does not cancel the first request.
func TestPipelinedRequestAfterWatch(t *testing.T) {
	started := make(chan struct{}, 1)
	proceed := make(chan struct{})
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/fn/watch" {
			echo(w, r)
			return
		}
		done := r.Context().Done()
		started <- struct{}{}
		<-proceed
		select {
		case <-done:
			io.WriteString(w, "cancelled")
		default:
			io.WriteString(w, "watched")
		}
	}), nil)
	for i := range 20 {
		c := dial(t, s.addr)
		c.send("GET /fn/watch HTTP/1.1\r\nHost: x\r\n\r\n")
		<-started
		c.send("GET /fn/echo?n=2 HTTP/1.1\r\nHost: x\r\n\r\n")
		proceed <- struct{}{}
		if r := c.response("GET"); r.body != "watched" {
			t.Fatalf("round %d: first: got %q, want watched", i, r.body)
		}
		if r := c.response("GET"); r.body != `GET /fn/echo?n=2 "" len=0 te=[]` {
			t.Fatalf("round %d: pipelined: got %q", i, r.body)
		}
	}
}

// TestShutdown: idle connections are closed, a request in flight is
// answered.
func TestShutdown(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	fallback := &http.Server{Handler: http.NotFoundHandler()}
	f := front.New(front.Config{Routes: []httpx.FastRoute{route{http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fn/slow" {
			close(entered)
			<-release
		}
		io.WriteString(w, "done")
	})}}, Fallback: fallback, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- f.Serve(ln) }()
	idle := dial(t, ln.Addr().String())
	idle.send("GET /fn/x HTTP/1.1\r\nHost: x\r\n\r\n")
	idle.response("GET")
	busy := dial(t, ln.Addr().String())
	busy.send("GET /fn/slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered
	stopped := make(chan error, 1)
	go func() { stopped <- f.Shutdown(context.Background()) }()
	if !idle.closed() {
		t.Errorf("the idle connection stayed open")
	}
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	default:
	}
	close(release)
	if r := busy.response("GET"); r.body != "done" {
		t.Errorf("in flight: got %q", r.body)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Errorf("still accepting")
	}
}
