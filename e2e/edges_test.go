package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The edge probes: handlers whose event selects an unusual behaviour.
const pythonEdges = `import os, uuid

INSTANCE = uuid.uuid4().hex  # tells instances apart (each has its own pid namespace)

def handle(event, context):
    event = event if isinstance(event, dict) else {}
    mode = event.get("mode")
    if mode == "print":
        print("x" * event["n"])
        return "printed"
    if mode == "big":
        return {"statusCode": 200, "headers": {"Cache-Control": "public, max-age=600"}, "body": "y" * event["n"]}
    if mode == "instance":
        return INSTANCE
    if mode == "die":
        os._exit(1)
    if mode == "big-header":
        return {"statusCode": 200, "headers": {"X-Big": "h" * 2_000_000}, "body": "x"}
    return {"method": context.method}
`

const nodeEdges = `exports.handle = async (event, context) => {
  event = event || {};
  if (event.mode === 'print') { console.log('x'.repeat(event.n)); return 'printed'; }
  if (event.mode === 'big') return { statusCode: 200, headers: { 'Cache-Control': 'public, max-age=600' }, body: 'y'.repeat(event.n) };
  if (event.mode === 'stray') { setTimeout(() => { throw new Error('stray timer'); }, 10); return 'returned'; }
  if (event.mode === 'sleep') { await new Promise((resolve) => setTimeout(resolve, event.ms)); return 'slept'; }
  return { method: context.method };
};
`

func deployEdges(t *testing.T, s *server) {
	t.Helper()
	// One instance each, so that an invocation holding it would hold up
	// the next; a timeout far above what any case may take.
	s.mustCLI("deploy", writeTree(t, map[string]string{"handler.py": pythonEdges}), "--name", "edge-py", "--runtime", "python3.11",
		"--timeout", "60", "--max-instances", "1")
	s.mustCLI("deploy", writeTree(t, map[string]string{"handler.js": nodeEdges}), "--name", "edge-node", "--runtime", "nodejs20",
		"--timeout", "60", "--max-instances", "1")
}

func TestInvocationEdges(t *testing.T) {
	s := startServer(t, serverOptions{})
	deployEdges(t, s)
	client := &http.Client{Timeout: 20 * time.Second} // a third of the functions' timeout

	for _, fn := range []string{"edge-py", "edge-node"} {
		t.Run(fn+" output over the log limit", func(t *testing.T) {
			code, h, body := s.post("/fn/default/"+fn, `{"mode": "print", "n": 100000}`)
			if code != 200 || body != `"printed"` {
				t.Fatalf("got %d %s; want 200 and the handler's result", code, body)
			}
			rec := s.waitInvocation(h.Get("X-Sless-Invocation-Id"))
			const printed = 100000 + 1 // the line and its newline
			want := strings.Repeat("x", 64<<10) + fmt.Sprintf("...[truncated %d bytes]", printed-64<<10)
			if rec.Logs != want || rec.StatusCode != 200 || rec.Error != "" {
				t.Errorf("record: status %d, error %q, %d bytes of logs ending in %q; want 200, no error and %d bytes ending in %q",
					rec.StatusCode, rec.Error, len(rec.Logs), rec.Logs[max(0, len(rec.Logs)-30):], len(want), want[len(want)-30:])
			}
		})

		t.Run(fn+" every method completes", func(t *testing.T) {
			for _, method := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE"} {
				req, err := http.NewRequest(method, s.endpoint+"/fn/default/"+fn+"/x", nil)
				if err != nil {
					t.Fatal(err)
				}
				started := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("%s: %v after %v; want an answer at once", method, err, time.Since(started))
					continue
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := fmt.Sprintf(`{"method":%q}`, method)
				if resp.ContentLength != int64(len(want)) {
					t.Errorf("%s: Content-Length %d; want the handler's %d", method, resp.ContentLength, len(want))
				}
				if method == "HEAD" {
					want = ""
				}
				if err != nil || resp.StatusCode != 200 || string(body) != want {
					t.Errorf("%s: got %d %q (%v); want 200 %q", method, resp.StatusCode, body, err, want)
				}
				if rec := s.waitInvocation(resp.Header.Get("X-Sless-Invocation-Id")); rec.Error != "" || rec.StatusCode != 200 {
					t.Errorf("%s: record status %d, error %q; want 200 and no error", method, rec.StatusCode, rec.Error)
				}
			}
			// A tunnel is not a function call: refused without an instance.
			conn, err := net.DialTimeout("tcp", strings.TrimPrefix(s.endpoint, "http://"), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(20 * time.Second))
			fmt.Fprintf(conn, "CONNECT /fn/default/%s HTTP/1.1\r\nHost: sless\r\n\r\n", fn)
			resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: "CONNECT"})
			if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("CONNECT: got %v %v; want 405", resp, err)
			}
			// The instance is still the function's only one, and free.
			if code, _, body := s.post("/fn/default/"+fn, `{}`); code != 200 {
				t.Errorf("after the methods: got %d %s; want 200", code, body)
			}
		})

		t.Run(fn+" expect 100-continue", func(t *testing.T) {
			// Each call must get its own answer: a 100 Continue from the
			// instance once passed for the answer, and the real one went to
			// the next caller.
			for i, method := range []string{"POST", "GET", "POST", "GET"} {
				var body io.Reader
				if method == "POST" {
					body = strings.NewReader(`{"pad": "` + strings.Repeat("a", 100_000) + `"}`)
				}
				req, err := http.NewRequest(method, s.endpoint+"/fn/default/"+fn, body)
				if err != nil {
					t.Fatal(err)
				}
				if method == "POST" {
					req.Header.Set("Expect", "100-continue")
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if want := fmt.Sprintf(`{"method":%q}`, method); resp.StatusCode != 200 || string(data) != want {
					t.Errorf("call %d (%s): got %d %q; want 200 %s", i, method, resp.StatusCode, data, want)
				}
			}
		})

		if fn == "edge-py" {
			t.Run(fn+" headers over the limit", func(t *testing.T) {
				_, _, instance := s.post("/fn/default/"+fn, `{"mode": "instance"}`)
				code, _, body := s.post("/fn/default/"+fn, `{"mode": "big-header"}`)
				if code != http.StatusBadGateway || !strings.Contains(body, "the headers exceed the limit of 1.0 MiB") {
					t.Errorf("got %d %.200s; want 502 naming the limit", code, body)
				}
				// The handler's answer was too large; its instance is fine and stays.
				if _, _, again := s.post("/fn/default/"+fn, `{"mode": "instance"}`); again != instance {
					t.Errorf("instance after the refused answer: %s, want the same instance %s", again, instance)
				}
			})
		}

		if fn == "edge-node" {
			t.Run(fn+" error thrown after the handler returned fails nothing", func(t *testing.T) {
				if code, _, body := s.post("/fn/default/"+fn, `{"mode": "stray"}`); code != 200 || body != `"returned"` {
					t.Fatalf("got %d %s; want 200", code, body)
				}
				// The stray timer fires while this call waits on the same instance.
				if code, _, body := s.post("/fn/default/"+fn, `{"mode": "sleep", "ms": 500}`); code != 200 || body != `"slept"` {
					t.Errorf("the next call: got %d %s; want 200", code, body)
				}
			})
		}

		t.Run(fn+" result cap on /fn and invoke", func(t *testing.T) {
			big := `{"mode": "big", "n": 7340032}` // 7 MiB, over the default 6 MiB
			code, h, body := s.post("/fn/default/"+fn, big)
			if code != http.StatusBadGateway || !strings.Contains(body, "the body of 7.0 MiB exceeds the limit of 6.0 MiB") {
				t.Errorf("/fn: got %d %.200s; want 502 naming the limit", code, body)
			}
			if cc := h.Get("Cache-Control"); cc != "" {
				t.Errorf("/fn: the platform's 502 carries the function's Cache-Control %q", cc)
			}
			code, data := s.api("POST", "/v1/namespaces/default/functions/"+fn+"/invoke", "application/json", []byte(big))
			if code != http.StatusBadGateway || !strings.Contains(string(data), "the body of 7.0 MiB exceeds the limit of 6.0 MiB") {
				t.Errorf("invoke: got %d %.200s; want 502 naming the limit", code, data)
			}
			small := `{"mode": "big", "n": 1048576}`
			if code, h, body := s.post("/fn/default/"+fn, small); code != 200 || len(body) != 1<<20 ||
				h.Get("Content-Length") != "1048576" || h.Get("Cache-Control") == "" {
				t.Errorf("/fn under the limit: got %d and %d bytes, headers %v; want 200 and 1 MiB of declared length, with the function's headers",
					code, len(body), h)
			}
			if code, data := s.api("POST", "/v1/namespaces/default/functions/"+fn+"/invoke", "application/json", []byte(small)); code != 200 || len(data) != 1<<20 {
				t.Errorf("invoke under the limit: got %d and %d bytes; want 200 and 1 MiB", code, len(data))
			}
		})
	}
}

// absolutePath matches the start of an absolute path in a message.
var absolutePath = regexp.MustCompile(`(^|[\s'"(])/\w`)

// TestLoadErrorNamesOwnFiles deploys handlers that fail to load: what /fn
// callers get names the function's files, not where the server keeps them.
func TestLoadErrorNamesOwnFiles(t *testing.T) {
	s := startServer(t, serverOptions{})
	for _, tc := range []struct{ name, runtime, file, code, want string }{
		{"broken-py", "python3.11", "handler.py",
			"import os\nopen(os.path.join(os.path.dirname(__file__), 'data', 'missing.txt'))\n", "data/missing.txt"},
		{"broken-node", "nodejs20", "handler.js", "require('./lib/missing-thing');\n", "handler.js"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.mustCLI("deploy", writeTree(t, map[string]string{tc.file: tc.code}), "--name", tc.name, "--runtime", tc.runtime)
			code, _, body := s.post("/fn/default/"+tc.name, `{}`)
			if code != http.StatusBadGateway || !strings.Contains(body, "could not be loaded") || !strings.Contains(body, tc.want) {
				t.Errorf("got %d %s; want 502 saying the handler could not be loaded, naming %s", code, body, tc.want)
			}
			if absolutePath.MatchString(body) || strings.Contains(body, "artifacts") {
				t.Errorf("got %s; want no server path in the answer", body)
			}
		})
	}
}

// TestResponseCutShort kills an instance while its body streams to a client
// that waits: the client must see the connection fail, not a short body.
func TestResponseCutShort(t *testing.T) {
	// A body far larger than what the socket buffers between instance and
	// client hold, under the result cap.
	s := startServer(t, serverOptions{env: []string{"SLESS_MAX_RESULT_BYTES=64MiB"}})
	// One instance that takes a second invocation while the first streams.
	s.mustCLI("deploy", writeTree(t, map[string]string{"handler.py": pythonEdges}), "--name", "edge-cut", "--runtime", "python3.11",
		"--timeout", "60", "--max-instances", "1", "--concurrency", "2")
	resp, err := http.Post(s.endpoint+"/fn/default/edge-cut", "application/json", strings.NewReader(`{"mode": "big", "n": 30000000}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("got %d %.300s; want the handler's 200", resp.StatusCode, body)
	}
	// The head is here, most of the body is still in the instance: end it.
	if code, _, body := s.post("/fn/default/edge-cut", `{"mode": "die"}`); code != http.StatusBadGateway {
		t.Fatalf("the call that ends the instance: got %d %s; want 502", code, body)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil {
		t.Errorf("read %d of 30000000 bytes and a normal end; want the connection to fail", n)
	}
	rec := s.waitInvocation(resp.Header.Get("X-Sless-Invocation-Id"))
	if !strings.Contains(rec.Error, "cut short") || rec.StatusCode != http.StatusBadGateway {
		t.Errorf("record: status %d, error %q; want 502 and an error saying the response was cut short", rec.StatusCode, rec.Error)
	}
}

// A cold start's handler gets its function's whole timeout, however long
// its code took to load: the time left that the handler sees counts from
// the load's end, as the server's own deadline does.
func TestSlowLoadKeepsTheTimeout(t *testing.T) {
	s := startServer(t, serverOptions{})
	s.mustCLI("deploy", writeTree(t, map[string]string{"handler.py": "import time\ntime.sleep(1)\n\n" +
		"def handle(event, context):\n    return {'remaining': context.remaining_ms()}\n"}),
		"--name", "slow-py", "--runtime", "python3.11", "--timeout", "3")
	s.mustCLI("deploy", writeTree(t, map[string]string{"handler.js": "Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000);\n" +
		"exports.handle = (event, context) => ({ remaining: context.remainingMs() });\n"}),
		"--name", "slow-node", "--runtime", "nodejs20", "--timeout", "3")
	for _, fn := range []string{"slow-py", "slow-node"} {
		t.Run(fn, func(t *testing.T) {
			code, h, body := s.post("/fn/default/"+fn, "")
			if code != 200 {
				t.Fatalf("got %d %s; want 200", code, body)
			}
			if !strings.Contains(h.Get("Server-Timing"), "cold;dur=") || strings.Contains(h.Get("Server-Timing"), "cold;dur=0.000") {
				t.Fatalf("Server-Timing %q: the first call was not a cold start", h.Get("Server-Timing"))
			}
			var got struct{ Remaining float64 }
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("answer %s: %v", body, err)
			}
			// Counted from the request's arrival, the load's second would be
			// taken off the handler's 3 s.
			if got.Remaining <= 2500 || got.Remaining > 3000 {
				t.Errorf("the handler has %v ms left of its 3 s timeout after a load of 1 s; want the whole timeout", got.Remaining)
			}
		})
	}
}
