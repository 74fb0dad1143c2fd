package wire_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/wire"
)

// fakeInstance answers every request on its connections with what respond
// returns, written raw; closeAfter closes the connection after that answer.
type fakeInstance struct {
	ln    net.Listener
	dials atomic.Int64

	mu    sync.Mutex
	conns []net.Conn
}

// closeConns closes the connections the instance accepted, as its exit
// would.
func (f *fakeInstance) closeConns() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}

type answer struct {
	raw        string
	closeAfter bool
}

func startFake(t *testing.T, respond func(r *http.Request) answer) *fakeInstance {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	f := &fakeInstance{ln: ln}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, nc)
			f.mu.Unlock()
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				for {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, r.Body)
					a := respond(r)
					if _, err := io.WriteString(nc, a.raw); err != nil || a.closeAfter {
						return
					}
				}
			}()
		}
	}()
	return f
}

func (f *fakeInstance) client() *wire.Client {
	var d net.Dialer
	return wire.NewClient(func(ctx context.Context) (net.Conn, error) {
		f.dials.Add(1)
		return d.DialContext(ctx, "tcp", f.ln.Addr().String())
	})
}

// do sends one invocation with the given method and limit, with a deadline
// far enough away that only a hang reaches it.
func do(t *testing.T, c *wire.Client, method string, maxResponse int64) (*runtime.ResponseBuffer, runtime.Result, error) {
	t.Helper()
	req, err := http.NewRequest(method, "http://fn/", nil)
	if err != nil {
		t.Fatal(err)
	}
	return send(t, c, req, maxResponse)
}

func send(t *testing.T, c *wire.Client, req *http.Request, maxResponse int64) (*runtime.ResponseBuffer, runtime.Result, error) {
	t.Helper()
	var out runtime.ResponseBuffer
	res, err := c.Do(context.Background(), &runtime.Invocation{ID: "inv", Request: req, Path: "/",
		Deadline: time.Now().Add(10 * time.Second), Trigger: []byte(`{"kind":"http"}`), MaxResponseBytes: maxResponse}, &out)
	return &out, res, err
}

func response(headers, body string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n%sContent-Length: %d\r\n\r\n%s", headers, len(body), body)
}

func logsHeader(logs string) string {
	value, _ := json.Marshal(logs)
	return "X-Sless-Logs: " + string(value) + "\r\n"
}

func TestLogs(t *testing.T) {
	cutByWrapper := strings.Repeat("w", wire.MaxLogBytes) + "...[truncated 34464 bytes]"
	tests := []struct {
		name, logs, want string
	}{
		{"short", "hello\n", "hello\n"},
		{"at the cap", strings.Repeat("a", wire.MaxLogBytes), strings.Repeat("a", wire.MaxLogBytes)},
		// Far longer than the read buffer: the head must still be read.
		{"cut by the wrapper", cutByWrapper, cutByWrapper},
		{"over the cap", strings.Repeat("b", 300_000), strings.Repeat("b", wire.MaxLogBytes) + fmt.Sprintf("...[truncated %d bytes]", 300_000-wire.MaxLogBytes)},
		{"over the cap, cut at a character", strings.Repeat("é", 40_000), strings.Repeat("é", wire.MaxLogBytes/2) + fmt.Sprintf("...[truncated %d bytes]", 80_000-wire.MaxLogBytes)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, func(*http.Request) answer { return answer{raw: response(logsHeader(tc.logs), "ok")} })
			c := f.client()
			defer c.Close()
			out, res, err := do(t, c, http.MethodPost, 0)
			if err != nil {
				t.Fatalf("Do: %v, want the response", err)
			}
			if res.Logs != tc.want {
				t.Errorf("logs: got %d bytes ending in %q, want %d bytes ending in %q",
					len(res.Logs), res.Logs[max(0, len(res.Logs)-30):], len(tc.want), tc.want[max(0, len(tc.want)-30):])
			}
			if out.StatusCode != 200 || out.Body.String() != "ok" {
				t.Errorf("response: got %d %q, want 200 ok", out.StatusCode, out.Body.String())
			}
			// The connection is still in step: the next invocation reuses it.
			if _, _, err := do(t, c, http.MethodPost, 0); err != nil {
				t.Fatalf("second Do: %v", err)
			}
			if n := f.dials.Load(); n != 1 {
				t.Errorf("dials: got %d, want 1", n)
			}
		})
	}
}

func TestHeadTooLarge(t *testing.T) {
	huge := "X-Big: " + strings.Repeat("x", wire.MaxHeadBytes) + "\r\n"
	f := startFake(t, func(*http.Request) answer { return answer{raw: response(huge, "ok")} })
	c := f.client()
	defer c.Close()
	_, _, err := do(t, c, http.MethodPost, 0)
	if !errors.Is(err, runtime.ErrResponseTooLarge) || !strings.Contains(err.Error(), "the headers exceed the limit of 1.0 MiB") {
		t.Errorf("Do: got %v, want ErrResponseTooLarge saying the headers are too large", err)
	}
}

func TestHeadRequest(t *testing.T) {
	// The wrappers answer HEAD with the Content-Length a GET would have
	// and no body.
	f := startFake(t, func(r *http.Request) answer {
		if r.Method == http.MethodHead {
			return answer{raw: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n"}
		}
		return answer{raw: response("", "after")}
	})
	c := f.client()
	defer c.Close()
	started := time.Now()
	out, res, err := do(t, c, http.MethodHead, 0)
	if err != nil || res.Err != nil {
		t.Fatalf("HEAD: got %v / %v after %v, want the response at once", err, res.Err, time.Since(started))
	}
	if out.StatusCode != 200 || out.Body.Len() != 0 || out.Header().Get("Content-Type") != "application/json" ||
		out.Header().Get("Content-Length") != "17" {
		t.Errorf("HEAD: got %d %v %q, want 200 with the headers, Content-Length 17, and no body", out.StatusCode, out.Header(), out.Body.String())
	}
	out, _, err = do(t, c, http.MethodGet, 0)
	if err != nil || out.Body.String() != "after" || out.Header().Get("Content-Length") != "5" {
		t.Fatalf("GET after HEAD: got %v %q %v, want the GET's own response and length", err, out.Body.String(), out.Header())
	}
	if n := f.dials.Load(); n != 1 {
		t.Errorf("dials: got %d, want 1 (the connection survives a HEAD)", n)
	}
}

// TestNoBodyWhateverTheLength: a 304 or 204 has no body, even with a
// Content-Length, and the connection stays in step.
func TestNoBodyWhateverTheLength(t *testing.T) {
	for _, status := range []string{"304 Not Modified", "204 No Content"} {
		t.Run(status, func(t *testing.T) {
			f := startFake(t, func(*http.Request) answer {
				return answer{raw: "HTTP/1.1 " + status + "\r\nETag: \"v1\"\r\nContent-Length: 20\r\n\r\n"}
			})
			c := f.client()
			defer c.Close()
			for i := range 2 {
				out, res, err := do(t, c, http.MethodGet, 0)
				if err != nil || res.Err != nil || out.Body.Len() != 0 || out.Header().Get("Etag") != `"v1"` {
					t.Fatalf("call %d: got %v / %v, %v %q, want the answer without a body", i, err, res.Err, out.Header(), out.Body.String())
				}
			}
			if n := f.dials.Load(); n != 1 {
				t.Errorf("dials: got %d, want 1", n)
			}
		})
	}
}

func TestMaxResponseBytes(t *testing.T) {
	body := strings.Repeat("z", 1000)
	chunked := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	tests := []struct {
		name     string
		raw      string
		limit    int64
		wantErr  bool  // Do fails, nothing written
		wantCut  bool  // Result.Err set after the head
		wantBody int64 // bytes written
	}{
		{"declared under the limit", response("", body), 1000, false, false, 1000},
		{"declared over the limit", response("", body), 999, true, false, 0},
		{"streamed under the limit", chunked, 1000, false, false, 1000},
		{"streamed over the limit", chunked, 600, false, true, 600},
		{"no limit", chunked, 0, false, false, 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, func(*http.Request) answer { return answer{raw: tc.raw} })
			c := f.client()
			defer c.Close()
			out, res, err := do(t, c, http.MethodPost, tc.limit)
			if gotErr := errors.Is(err, runtime.ErrResponseTooLarge); gotErr != tc.wantErr {
				t.Errorf("Do error: got %v, want ErrResponseTooLarge: %v", err, tc.wantErr)
			}
			if gotCut := errors.Is(res.Err, runtime.ErrResponseTooLarge); gotCut != tc.wantCut {
				t.Errorf("Result.Err: got %v, want ErrResponseTooLarge: %v", res.Err, tc.wantCut)
			}
			if int64(out.Body.Len()) != tc.wantBody || res.ResponseBytes != tc.wantBody {
				t.Errorf("body: got %d bytes written, %d recorded; want %d", out.Body.Len(), res.ResponseBytes, tc.wantBody)
			}
			if tc.wantErr && out.StatusCode != 0 {
				t.Errorf("status: got %d written, want nothing written", out.StatusCode)
			}
			if tc.wantErr || tc.wantCut {
				return
			}
			// A complete response leaves the connection at the next one.
			if out, _, err := do(t, c, http.MethodPost, tc.limit); err != nil || out.Body.Len() != len(body) {
				t.Errorf("second Do: got %v and %d bytes, want the whole body again", err, out.Body.Len())
			}
			if n := f.dials.Load(); n != 1 {
				t.Errorf("dials: got %d, want 1", n)
			}
		})
	}
}

func TestBodyCutShort(t *testing.T) {
	f := startFake(t, func(*http.Request) answer {
		return answer{raw: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this", closeAfter: true}
	})
	c := f.client()
	defer c.Close()
	out, res, err := do(t, c, http.MethodPost, 0)
	if err != nil {
		t.Fatalf("Do: %v, want the failure in Result.Err (the head was written)", err)
	}
	if !errors.Is(res.Err, runtime.ErrCrashed) || out.StatusCode != 200 || out.Body.String() != "only this" {
		t.Errorf("got %d %q, Result.Err %v; want 200, the partial body and ErrCrashed", out.StatusCode, out.Body.String(), res.Err)
	}
}

func TestInterimResponses(t *testing.T) {
	// Node.js answers "Expect: 100-continue" itself; an interim response
	// read as the answer would leave the real one for the next invocation.
	var n atomic.Int64
	f := startFake(t, func(r *http.Request) answer {
		if r.Header.Get("Expect") != "" {
			t.Errorf("the instance got Expect: %q, want it not forwarded", r.Header.Get("Expect"))
		}
		return answer{raw: "HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n" +
			response("", fmt.Sprintf("answer %d", n.Add(1)))}
	})
	c := f.client()
	defer c.Close()
	for i := 1; i <= 2; i++ {
		req, err := http.NewRequest(http.MethodPost, "http://fn/", strings.NewReader("body"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Expect", "100-continue")
		out, _, err := send(t, c, req, 0)
		if want := fmt.Sprintf("answer %d", i); err != nil || out.StatusCode != 200 || out.Body.String() != want {
			t.Fatalf("invocation %d: got %v %d %q, want 200 %q", i, err, out.StatusCode, out.Body.String(), want)
		}
		if link := out.Header().Get("Link"); link != "" {
			t.Errorf("invocation %d: Link %q copied from an interim response, want only the final response's headers", i, link)
		}
	}
}

// TestNotSent: an instance that is gone before it takes the invocation
// yields ErrNotSent, so that the caller may send it elsewhere; one that
// fails after reading it does not.
func TestNotSent(t *testing.T) {
	t.Run("idle connection closed, no listener", func(t *testing.T) {
		f := startFake(t, func(*http.Request) answer { return answer{raw: response("", "ok")} })
		c := f.client()
		if _, _, err := do(t, c, "GET", 0); err != nil {
			t.Fatal(err)
		}
		// The instance dies: its listener and the kept-alive connection
		// close.
		f.ln.Close()
		f.closeConns()
		_, _, err := do(t, c, "GET", 0)
		if !errors.Is(err, runtime.ErrNotSent) || !errors.Is(err, runtime.ErrCrashed) {
			t.Errorf("got %v, want ErrCrashed and ErrNotSent", err)
		}
	})
	t.Run("closed client", func(t *testing.T) {
		f := startFake(t, func(*http.Request) answer { return answer{raw: response("", "ok")} })
		c := f.client()
		c.Close()
		if _, _, err := do(t, c, "GET", 0); !errors.Is(err, runtime.ErrNotSent) {
			t.Errorf("got %v, want ErrNotSent", err)
		}
	})
	t.Run("closed after reading the request", func(t *testing.T) {
		f := startFake(t, func(*http.Request) answer { return answer{closeAfter: true} })
		_, _, err := do(t, f.client(), "GET", 0)
		if !errors.Is(err, runtime.ErrCrashed) || errors.Is(err, runtime.ErrNotSent) {
			t.Errorf("got %v, want ErrCrashed without ErrNotSent: the handler may have run", err)
		}
	})
}

// A control request that Send sent is answered before the invocation that
// Do writes behind it, on one connection; its answer decides whether the
// invocation's response is read, and the invocation's deadline counts
// from the answer.
func TestSendThenDo(t *testing.T) {
	const loading = 300 * time.Millisecond
	instance := func(status int) *fakeInstance {
		return startFake(t, func(r *http.Request) answer {
			if r.URL.Path == "/_sless/specialize" {
				time.Sleep(loading)
				return answer{raw: fmt.Sprintf("HTTP/1.1 %d X\r\nContent-Length: 2\r\n\r\n{}", status)}
			}
			time.Sleep(loading / 6) // read after the answer, not with it
			return answer{raw: response("", "invoked")}
		})
	}
	sendSpecialize := func(c *wire.Client, deadline time.Duration, answers chan<- string) {
		t.Helper()
		err := c.Send(context.Background(), "POST", "/_sless/specialize", []byte(`{}`), time.Now().Add(deadline),
			func(status int, body []byte, err error) error {
				answers <- fmt.Sprintf("%d %s %v", status, body, err)
				if status != 200 {
					return runtime.Errorf(runtime.ErrStart, "the handler could not be loaded", err)
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	invoke := func(c *wire.Client, timeout time.Duration) (*runtime.ResponseBuffer, error) {
		req, _ := http.NewRequest("POST", "http://fn/", strings.NewReader("{}"))
		var out runtime.ResponseBuffer
		_, err := c.Do(context.Background(), &runtime.Invocation{ID: "inv", Request: req, Path: "/",
			Deadline: time.Now().Add(timeout), Trigger: []byte(`{"kind":"http"}`)}, &out)
		return &out, err
	}

	t.Run("answered 200, then the invocation", func(t *testing.T) {
		f := instance(200)
		c := f.client()
		answers := make(chan string, 1)
		sendSpecialize(c, 10*time.Second, answers)
		// The invocation's timeout is shorter than the load: it counts
		// from the answer.
		out, err := invoke(c, loading/2)
		if err != nil || out.Body.String() != "invoked" {
			t.Fatalf("Do: %v, body %q; want the invocation's response", err, out.Body.String())
		}
		if got := <-answers; got != "200 {} <nil>" {
			t.Errorf("answered got %q", got)
		}
		if out, err := invoke(c, time.Second); err != nil || out.Body.String() != "invoked" || f.dials.Load() != 1 {
			t.Errorf("the next Do: %v, body %q, %d connections; want one connection for all", err, out.Body.String(), f.dials.Load())
		}
	})
	t.Run("answered 500: the invocation fails", func(t *testing.T) {
		c := instance(500).client()
		answers := make(chan string, 1)
		sendSpecialize(c, 10*time.Second, answers)
		out, err := invoke(c, 10*time.Second)
		if !errors.Is(err, runtime.ErrStart) || out.StatusCode != 0 {
			t.Errorf("Do: %v, status %d; want the error answered returned and nothing written", err, out.StatusCode)
		}
		if got := <-answers; got != "500 {} <nil>" {
			t.Errorf("answered got %q", got)
		}
	})
	t.Run("Await without an invocation", func(t *testing.T) {
		f := instance(200)
		c := f.client()
		answers := make(chan string, 1)
		sendSpecialize(c, 10*time.Second, answers)
		if err := c.Await(); err != nil {
			t.Fatal(err)
		}
		if got := <-answers; got != "200 {} <nil>" {
			t.Errorf("answered got %q", got)
		}
		if out, err := invoke(c, time.Second); err != nil || out.Body.String() != "invoked" || f.dials.Load() != 1 {
			t.Errorf("Do after Await: %v, body %q, %d connections; want the connection reused", err, out.Body.String(), f.dials.Load())
		}
	})
	t.Run("no answer by the deadline", func(t *testing.T) {
		c := instance(200).client()
		answers := make(chan string, 1)
		sendSpecialize(c, loading/3, answers)
		if _, err := invoke(c, 10*time.Second); err == nil {
			t.Error("Do succeeded; want the error answered returned")
		}
		if got := <-answers; !strings.HasPrefix(got, "0  ") || !strings.Contains(got, runtime.ErrTimeout.Error()) {
			t.Errorf("answered got %q; want a timeout", got)
		}
	})
}
