package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
)

// pythonProbe is a function whose behaviour the event selects.
const pythonProbe = `import os, time

def handle(event, context):
    event = event or {}
    mode = event.get("mode")
    if mode == "echo":
        print("echo", event.get("n"))
        return {"n": event.get("n"), "id": context.invocation_id}
    if mode == "status":
        return {"statusCode": 201, "headers": {"X-Custom": "yes"}, "body": "created"}
    if mode == "raise":
        raise ValueError("bad input")
    if mode == "sleep":
        time.sleep(event.get("seconds", 10))
        return "woke"
    if mode == "exit":
        os._exit(7)
    if mode == "env":
        return os.environ.get("GREETING")
    if mode == "headers":
        return context.headers
    return {"message": "Hello, " + event.get("name", "world") + "!"}
`

const nodeProbe = `exports.handle = async (event, context) => {
  event = event || {};
  if (event.mode === "echo") { console.log("echo", event.n); return { n: event.n, id: context.invocationId }; }
  if (event.mode === "raise") { throw new TypeError("bad input"); }
  if (event.mode === "later") { await new Promise((r) => setTimeout(r, 20)); return "later"; }
  if (event.mode === "exit") { process.exit(7); }
  return { message: "Hello, " + (event.name || "world") + "!" };
};
`

// post calls /fn with a JSON body and returns status, headers and body.
func (s *server) post(path string, body string) (int, http.Header, string) {
	s.t.Helper()
	resp, err := http.Post(s.endpoint+path, "application/json", strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(data)
}

func deployProbes(t *testing.T, s *server) {
	t.Helper()
	s.mustCLI("deploy", writeTree(t, map[string]string{"handler.py": pythonProbe}), "--name", "py", "--runtime", "python3.11",
		"--timeout", "2", "--env", "GREETING=hi", "--max-instances", "4", "--concurrency", "4")
	s.mustCLI("deploy", writeTree(t, map[string]string{"handler.js": nodeProbe}), "--name", "node", "--runtime", "nodejs20",
		"--max-instances", "4", "--concurrency", "8")
}

func TestInvoke(t *testing.T) {
	s := startServer(t, serverOptions{})
	deployProbes(t, s)

	for _, fn := range []string{"py", "node"} {
		t.Run(fn+" hello", func(t *testing.T) {
			code, h, body := s.post("/fn/default/"+fn, `{"name": "sless"}`)
			if code != 200 || body != `{"message":"Hello, sless!"}` || h.Get("Content-Type") != "application/json" {
				t.Errorf("got %d %q %v", code, body, h)
			}
			if h.Get("X-Sless-Invocation-Id") == "" || !strings.Contains(h.Get("Server-Timing"), "handler;dur=") {
				t.Errorf("missing invocation headers: %v", h)
			}
		})
		t.Run(fn+" exception", func(t *testing.T) {
			code, _, body := s.post("/fn/default/"+fn, `{"mode": "raise"}`)
			var e struct{ Error, Type string }
			json.Unmarshal([]byte(body), &e)
			if code != 500 || e.Error != "bad input" || (e.Type != "ValueError" && e.Type != "TypeError") {
				t.Errorf("got %d %s; want 500 with the error and its type", code, body)
			}
		})
		t.Run(fn+" 100 concurrent invocations", func(t *testing.T) {
			var wg sync.WaitGroup
			errs := make(chan string, 100)
			for i := range 100 {
				wg.Go(func() {
					code, h, body := s.post("/fn/default/"+fn, fmt.Sprintf(`{"mode": "echo", "n": %d}`, i))
					want := fmt.Sprintf(`{"n":%d,"id":"%s"}`, i, h.Get("X-Sless-Invocation-Id"))
					if code != 200 || body != want {
						errs <- fmt.Sprintf("request %d: got %d %s, want %s", i, code, body, want)
					}
				})
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Error(e)
			}
		})
		t.Run(fn+" crash gives 502 and the next call works", func(t *testing.T) {
			code, _, body := s.post("/fn/default/"+fn, `{"mode": "exit"}`)
			// The whole message: the public part of the error, nothing cut
			// out of its text.
			want := fmt.Sprintf(`{"error":"function \"%s\" crashed: exit status 7"}`, fn)
			if code != 502 || strings.TrimSpace(body) != want {
				t.Errorf("got %d %s; want 502 %s", code, body, want)
			}
			if code, _, _ := s.post("/fn/default/"+fn, `{}`); code != 200 {
				t.Errorf("after the crash: %d", code)
			}
		})
	}

	t.Run("statusCode response", func(t *testing.T) {
		code, h, body := s.post("/fn/default/py", `{"mode": "status"}`)
		if code != 201 || body != "created" || h.Get("X-Custom") != "yes" {
			t.Errorf("got %d %q %v", code, body, h)
		}
	})
	t.Run("async handler", func(t *testing.T) {
		if code, _, body := s.post("/fn/default/node", `{"mode": "later"}`); code != 200 || body != `"later"` {
			t.Errorf("got %d %s", code, body)
		}
	})
	t.Run("env", func(t *testing.T) {
		if code, _, body := s.post("/fn/default/py", `{"mode": "env"}`); code != 200 || body != `"hi"` {
			t.Errorf("got %d %s", code, body)
		}
	})
	t.Run("the function sees who called", func(t *testing.T) {
		code, _, body := s.post("/fn/default/py", `{"mode": "headers"}`)
		var h map[string]string
		if err := json.Unmarshal([]byte(body), &h); code != 200 || err != nil {
			t.Fatalf("got %d %s; want the handler's headers", code, body)
		}
		want := map[string]string{"x-forwarded-for": "127.0.0.1", "x-forwarded-host": strings.TrimPrefix(s.endpoint, "http://")}
		for k, v := range want {
			if h[k] != v {
				t.Errorf("%s: %q, want %q", k, h[k], v)
			}
		}
	})
	t.Run("timeout gives 504 and the next call works", func(t *testing.T) {
		start := time.Now()
		code, _, body := s.post("/fn/default/py", `{"mode": "sleep", "seconds": 30}`)
		if code != 504 || !strings.Contains(body, "timed out after 2s") || time.Since(start) > 10*time.Second {
			t.Errorf("got %d %s after %s; want 504 after about 2s", code, body, time.Since(start))
		}
		if code, _, _ := s.post("/fn/default/py", `{}`); code != 200 {
			t.Errorf("after the timeout: %d", code)
		}
	})
	t.Run("request too large", func(t *testing.T) {
		big := `{"pad": "` + strings.Repeat("x", 7<<20) + `"}`
		if code, _, body := s.post("/fn/default/py", big); code != 413 || !strings.Contains(body, "6.0 MiB") {
			t.Errorf("got %d %s; want 413 naming the limit", code, body)
		}
	})
	t.Run("unknown and not ready functions", func(t *testing.T) {
		if code, _, body := s.post("/fn/default/nope", `{}`); code != 404 || !strings.Contains(body, `function \"nope\" not found`) {
			t.Errorf("unknown: %d %s", code, body)
		}
		s.api("POST", "/v1/namespaces/default/functions", "application/json", []byte(`{"name": "empty", "runtime": "python3.11"}`))
		s.api("POST", "/v1/namespaces/default/triggers", "application/json", []byte(`{"name": "empty", "function": "empty", "type": "http"}`))
		// The trigger opens /fn once reconciled, a moment after it is created.
		var code int
		var body string
		s.waitFor("the new http trigger to open /fn", func() bool {
			code, _, body = s.post("/fn/default/empty", `{}`)
			return code != 404
		})
		if code != 503 || !strings.Contains(body, "Pending") {
			t.Errorf("no code yet: %d %s; want 503 naming the phase", code, body)
		}
		if code, _, _ := s.post("/fn/default/py/_sless/specialize", `{}`); code != 404 {
			t.Errorf("reserved path: %d; want 404", code)
		}
	})
	t.Run("logs are captured per invocation", func(t *testing.T) {
		_, h, _ := s.post("/fn/default/py", `{"mode": "echo", "n": 4242}`)
		id := h.Get("X-Sless-Invocation-Id")
		rec := s.waitInvocation(id)
		if rec.Logs != "echo 4242\n" || rec.StatusCode != 200 || rec.TriggerKind != "http" {
			t.Errorf("invocation record: %+v; want the logs of this invocation only", rec)
		}
		out := s.mustCLI("logs", "py", "--invocation", id)
		if !strings.Contains(out, "echo 4242") {
			t.Errorf("sless logs: %s", out)
		}
	})
	t.Run("cli invoke", func(t *testing.T) {
		out := s.mustCLI("invoke", "node", "-d", `{"name": "cli"}`)
		if strings.TrimSpace(out) != `{"message":"Hello, cli!"}` {
			t.Errorf("sless invoke: %q", out)
		}
		if out := s.mustCLI("invoke", "py", "-d", `{"mode": "headers"}`); strings.Contains(strings.ToLower(out), "authorization") {
			t.Errorf("the function saw the API token: %s", out)
		}
		_, errOut, err := s.cli("invoke", "py", "-d", `{"mode": "raise"}`)
		if err == nil || !strings.Contains(errOut, "HTTP 500") {
			t.Errorf("sless invoke of a failing handler: %v %s", err, errOut)
		}
		// The ledger writes shortly after the answer.
		var list string
		s.waitFor("the failed invocation in the listing", func() bool {
			list = s.mustCLI("invocations", "py", "--status", "error")
			return strings.Contains(list, "500")
		})
		if strings.Contains(list, " 200 ") {
			t.Errorf("sless invocations --status error lists a success:\n%s", list)
		}
	})
	t.Run("deleted function answers 404", func(t *testing.T) {
		s.mustCLI("fn", "delete", "node")
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, _, _ := s.post("/fn/default/node", `{}`)
			if code == 404 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("still %d after delete", code)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// record is the part of an invocation record the tests read.
type record struct {
	ID          string  `json:"id"`
	Function    string  `json:"function"`
	StatusCode  int     `json:"status_code"`
	TriggerKind string  `json:"trigger_kind"`
	Logs        string  `json:"logs"`
	Error       string  `json:"error"`
	ColdStart   bool    `json:"cold_start"`
	DurationMS  float64 `json:"duration_ms"`
	StartedAt   string  `json:"started_at"`
}

// waitInvocation polls for a record, which the ledger writes shortly after
// the response.
func (s *server) waitInvocation(id string) record {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := s.api("GET", "/v1/namespaces/default/invocations/"+id, "", nil)
		if code == 200 {
			var r record
			if err := json.Unmarshal(body, &r); err != nil {
				s.t.Fatal(err)
			}
			return r
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("invocation %s: HTTP %d %s", id, code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLedgerSurvivesShutdownUnderLoad sends a steady load, stops the server
// with SIGTERM in the middle, and checks after a restart that every answered
// request has its record.
func TestLedgerSurvivesShutdownUnderLoad(t *testing.T) {
	s := startServer(t, serverOptions{})
	s.mustCLI("deploy", "../examples/hello-python", "--name", "hello", "--runtime", "python3.11", "--concurrency", "8")

	var (
		mu       sync.Mutex
		answered []string
		wg       sync.WaitGroup
		stop     = make(chan struct{})
	)
	client := &http.Client{Timeout: 10 * time.Second}
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Post(s.endpoint+"/fn/default/hello", "application/json", bytes.NewReader([]byte(`{"name": "x"}`)))
				if err != nil {
					return // the server is gone
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					mu.Lock()
					answered = append(answered, resp.Header.Get("X-Sless-Invocation-Id"))
					mu.Unlock()
				}
			}
		})
	}
	// The load starts with a cold start, which a busy machine makes slow.
	testenv.Eventually(t, time.Minute, "a first answer", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(answered) > 0
	})
	time.Sleep(time.Second)
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done
	close(stop)
	wg.Wait()
	if !s.cmd.ProcessState.Success() {
		t.Fatalf("server exited with %v", s.cmd.ProcessState)
	}
	if len(answered) < 50 {
		t.Fatalf("only %d requests were answered before SIGTERM; the test needs load", len(answered))
	}
	s.start()
	var missing []string
	for _, id := range answered {
		if code, _ := s.api("GET", "/v1/namespaces/default/invocations/"+id, "", nil); code != 200 {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d answered invocations have no record after the restart, e.g. %s", len(missing), len(answered), missing[0])
	}
	t.Logf("%d answered invocations, all recorded", len(answered))
}

// TestRefusalsAtCapacity: a /fn request refused at capacity is a paced 503
// without an invocation id, and the ledger gets one record per function and
// second that counts the refusals instead of one record each.
func TestRefusalsAtCapacity(t *testing.T) {
	s := startServer(t, serverOptions{env: []string{"SLESS_QUEUE_DEPTH=1"}})
	s.mustCLI("deploy", writeTree(t, map[string]string{"handler.py": pythonProbe}), "--name", "py", "--runtime", "python3.11",
		"--max-instances", "1", "--concurrency", "1", "--timeout", "20")
	if code, _, body := s.post("/fn/default/py", `{}`); code != 200 {
		t.Fatalf("warm-up: %d %s", code, body)
	}
	// Of 22 calls at once, one runs, one waits and 20 are refused.
	const calls, refused = 22, 20
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		codes = map[int]int{}
	)
	for range calls {
		wg.Go(func() {
			start := time.Now()
			code, h, body := s.post("/fn/default/py", `{"mode": "sleep", "seconds": 3}`)
			mu.Lock()
			codes[code]++
			mu.Unlock()
			if code != http.StatusServiceUnavailable {
				return
			}
			switch {
			case !strings.Contains(body, "at capacity") || h.Get("Retry-After") != "1":
				t.Errorf("got %d %s %v; want 503 at capacity with Retry-After", code, body, h)
			case h.Get("X-Sless-Invocation-Id") != "":
				t.Errorf("a refusal carries invocation id %s; refusals are not recorded one by one", h.Get("X-Sless-Invocation-Id"))
			case time.Since(start) < 100*time.Millisecond:
				t.Errorf("a refusal was answered after %v; want it paced by 100ms", time.Since(start))
			}
		})
	}
	wg.Wait()
	if codes[http.StatusOK] != calls-refused || codes[http.StatusServiceUnavailable] != refused {
		t.Fatalf("answers by status %v; want %d 200 and %d 503", codes, calls-refused, refused)
	}
	count := regexp.MustCompile(`^(\d+) invocations on /fn refused at capacity`)
	s.waitFor("summary records counting every refusal", func() bool {
		total := 0
		for _, r := range s.invocations("functions/py/invocations?status=503") {
			m := count.FindStringSubmatch(r.Error)
			if m == nil {
				t.Fatalf("a 503 record that is not a summary: %+v", r)
			}
			n, _ := strconv.Atoi(m[1])
			total += n
		}
		if total > refused {
			t.Fatalf("the summary records count %d refusals, want %d", total, refused)
		}
		return total == refused
	})
}
