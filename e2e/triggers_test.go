package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
)

// triggerStatus is the part of a trigger the tests read.
type triggerStatus struct {
	Enabled bool `json:"enabled"`
	Status  struct {
		Phase   string `json:"phase"`
		Message string `json:"message"`
		Fired   int64  `json:"fired"`
		Skipped int64  `json:"skipped"`
		Failed  int64  `json:"failed"`
		Dead    int64  `json:"dead_lettered"`
	} `json:"status"`
}

func (s *server) getTrigger(name string) triggerStatus {
	s.t.Helper()
	code, body := s.api("GET", "/v1/namespaces/default/triggers/"+name, "", nil)
	if code != http.StatusOK {
		s.t.Fatalf("GET trigger %s: %d %s", name, code, body)
	}
	var t triggerStatus
	if err := json.Unmarshal(body, &t); err != nil {
		s.t.Fatal(err)
	}
	return t
}

// waitFor polls cond for up to a minute.
func (s *server) waitFor(what string, cond func() bool) {
	s.t.Helper()
	testenv.Eventually(s.t, time.Minute, what, cond)
}

// invocations lists invocations with a query string.
func (s *server) invocations(path string) []record {
	s.t.Helper()
	code, body := s.api("GET", "/v1/namespaces/default/"+path, "", nil)
	if code != http.StatusOK {
		s.t.Fatalf("GET %s: %d %s", path, code, body)
	}
	var page struct{ Items []record }
	if err := json.Unmarshal(body, &page); err != nil {
		s.t.Fatal(err)
	}
	return page.Items
}

func TestHTTPTriggerDisableEnable(t *testing.T) {
	s := startServer(t, serverOptions{})
	// An id per process (a sandboxed instance is pid 1 of its namespace).
	dir := writeTree(t, map[string]string{"handler.py": "import uuid\nID = uuid.uuid4().hex\ndef handle(event, context):\n    return ID\n"})
	s.mustCLI("deploy", dir, "--name", "web", "--runtime", "python3.11", "--min-instances", "1")
	code, _, pid := s.post("/fn/default/web", "")
	if code != 200 {
		t.Fatalf("before disabling: %d", code)
	}
	// The CLI returns once the server applied the change: /fn follows at once.
	s.mustCLI("trigger", "disable", "web")
	if code, _, body := s.post("/fn/default/web", ""); code != 404 || !strings.Contains(body, "no enabled http trigger") {
		t.Errorf("right after disabling: %d %s; want 404 saying there is no enabled http trigger", code, body)
	}
	// Nothing was deleted: the function is there, Ready, and still runs for the CLI.
	if code, fn := s.getFunction("default", "web"); code != 200 || fn.Status.Phase != "Ready" {
		t.Errorf("function after disabling: %d %+v", code, fn.Status)
	}
	if out := s.mustCLI("invoke", "web"); strings.TrimSpace(out) == pid {
		t.Errorf("the min_instances instance kept running while disabled (process %s answered again)", pid)
	}
	s.mustCLI("trigger", "enable", "web")
	if code, _, body := s.post("/fn/default/web", ""); code != 200 {
		t.Errorf("right after enabling: %d %s; want 200", code, body)
	}

	// Deleting the trigger closes /fn; the function stays.
	s.mustCLI("trigger", "delete", "web")
	s.waitFor("/fn to answer 404 after the trigger was deleted", func() bool { code, _, _ := s.post("/fn/default/web", ""); return code == 404 })
}

// TestIngressNeedsTheKubernetesMode: the CLI's --ingress-* flags reach the
// API, which the embedded mode answers with a clear refusal and nothing
// stored.
func TestIngressNeedsTheKubernetesMode(t *testing.T) {
	s := startServer(t, serverOptions{})
	dir := writeTree(t, map[string]string{"handler.py": "def handle(event, context):\n    return 1\n"})
	s.mustCLI("deploy", dir, "--name", "hello", "--runtime", "python3.11", "--http=false")
	_, stderr, err := s.cli("trigger", "create", "web", "--function", "hello", "--type", "http",
		"--ingress-host", "hello.example.com", "--ingress-class", "nginx")
	if err == nil || !strings.Contains(stderr, "ingress: needs the kubernetes mode") {
		t.Errorf("trigger create with --ingress-host: err %v, stderr %q; want the kubernetes mode refusal", err, stderr)
	}
	if code, body := s.api("GET", "/v1/namespaces/default/triggers/web", "", nil); code != 404 {
		t.Errorf("the refused trigger: %d %s; want 404", code, body)
	}
}

// TestTriggerCreateWaitsUntilApplied checks that the CLI returns the trigger
// as the server applied it: its phase is known.
func TestTriggerCreateWaitsUntilApplied(t *testing.T) {
	s := startServer(t, serverOptions{})
	dir := writeTree(t, map[string]string{"handler.py": "def handle(event, context):\n    return 1\n"})
	s.mustCLI("deploy", dir, "--name", "tick", "--runtime", "python3.11", "--http=false")
	var created struct {
		Status struct {
			Phase              string `json:"phase"`
			ObservedGeneration int64  `json:"observed_generation"`
		} `json:"status"`
	}
	out := s.mustCLI("-o", "json", "trigger", "create", "hourly", "--function", "tick", "--type", "cron", "--schedule", "@hourly")
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if st := created.Status; st.Phase != "Active" || st.ObservedGeneration != 1 {
		t.Errorf("created trigger's status %+v; want it applied: Active, generation 1", st)
	}
}

func TestCronTrigger(t *testing.T) {
	s := startServer(t, serverOptions{})
	dir := writeTree(t, map[string]string{"handler.py": `import time
def handle(event, context):
    if event.get("sleep"):
        time.sleep(event["sleep"])
    return {"got": event, "trigger": context.trigger}
`})
	s.mustCLI("deploy", dir, "--name", "tick", "--runtime", "python3.11", "--http=false", "--concurrency", "4")

	t.Run("every second, recorded with its payload", func(t *testing.T) {
		s.mustCLI("trigger", "create", "every-second", "--function", "tick", "--type", "cron", "--schedule", "@every 1s",
			"--payload", `{"hello": "cron"}`)
		s.waitFor("two cron runs", func() bool { return len(s.invocations("triggers/every-second/invocations")) >= 2 })
		recs := s.invocations("triggers/every-second/invocations")
		if recs[0].StatusCode != 200 || recs[0].TriggerKind != "cron" {
			t.Errorf("cron invocation: %+v", recs[0])
		}
		// The status's counts are written in the background.
		s.waitFor("the status to count the runs", func() bool {
			st := s.getTrigger("every-second")
			return st.Status.Phase == "Active" && st.Status.Fired >= 2
		})
		s.mustCLI("trigger", "disable", "every-second")
		time.Sleep(1500 * time.Millisecond) // a run in flight may still finish
		before := len(s.invocations("triggers/every-second/invocations"))
		time.Sleep(2500 * time.Millisecond)
		if after := len(s.invocations("triggers/every-second/invocations")); after != before {
			t.Errorf("a disabled cron trigger fired: %d runs, then %d", before, after)
		}
	})

	t.Run("Forbid skips an overlapping run", func(t *testing.T) {
		s.mustCLI("trigger", "create", "slow", "--function", "tick", "--type", "cron", "--schedule", "@every 1s",
			"--payload", `{"sleep": 2.5}`, "--concurrency-policy", "Forbid")
		s.waitFor("a skipped run", func() bool { return s.getTrigger("slow").Status.Skipped >= 1 })
		st := s.invocations("triggers/slow/invocations")
		s.mustCLI("trigger", "delete", "slow")
		for i := 1; i < len(st); i++ {
			if gap := st[i-1].startedAt().Sub(st[i].startedAt()); gap < 2*time.Second {
				t.Errorf("runs %s and %s overlapped (%s apart) under Forbid", st[i].ID, st[i-1].ID, gap)
			}
		}
	})

	t.Run("invalid schedule is a 400 naming the field", func(t *testing.T) {
		code, body := s.api("POST", "/v1/namespaces/default/triggers", "application/json",
			[]byte(`{"name": "bad", "function": "tick", "type": "cron", "schedule": "61 * * * *"}`))
		if code != 400 || !strings.Contains(string(body), "schedule") {
			t.Errorf("got %d %s", code, body)
		}
		code, body = s.api("POST", "/v1/namespaces/default/triggers", "application/json",
			[]byte(`{"name": "bad", "function": "tick", "type": "cron", "schedule": "@hourly", "timezone": "Mars/Olympus"}`))
		if code != 400 || !strings.Contains(string(body), "timezone") {
			t.Errorf("got %d %s", code, body)
		}
		code, body = s.api("POST", "/v1/namespaces/default/triggers", "application/json",
			[]byte(`{"name": "bad", "function": "nope", "type": "http"}`))
		if code != 400 || !strings.Contains(string(body), `function \"nope\" does not exist`) {
			t.Errorf("got %d %s", code, body)
		}
	})
}

func TestJobRunsOncePerRunID(t *testing.T) {
	s := startServer(t, serverOptions{})
	// The function reports each run to the test over the network (a
	// sandboxed instance cannot write the test's files).
	var mu sync.Mutex
	var marks []string
	recorder := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		marks = append(marks, strings.TrimPrefix(r.URL.Path, "/"))
		mu.Unlock()
	}))
	t.Cleanup(recorder.Close)
	dir := writeTree(t, map[string]string{"handler.py": fmt.Sprintf(`import time, urllib.request
def handle(event, context):
    urllib.request.urlopen("%s/%%s" %% context.trigger.get("run_id")).read()
    if event and event.get("sleep"):
        time.sleep(event["sleep"])
    return {"run": context.trigger.get("run_id"), "event": event}
`, recorder.URL)})
	s.mustCLI("deploy", dir, "--name", "batch", "--runtime", "python3.11", "--http=false")
	runs := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(marks)
	}

	out := s.mustCLI("job", "run", "nightly", "--function", "batch", "--payload", `{"n": 1}`)
	if !strings.Contains(out, `"run":1`) || !strings.Contains(out, `"n":1`) {
		t.Errorf("job run output: %s", out)
	}
	// The same run_id again runs nothing.
	code, body := s.api("PUT", "/v1/namespaces/default/jobs/nightly", "application/json",
		[]byte(`{"function": "batch", "payload": {"n": 1}, "run_id": 1}`))
	if code != 200 {
		t.Fatalf("PUT same run_id: %d %s", code, body)
	}
	time.Sleep(time.Second)
	if got := runs(); len(got) != 1 {
		t.Fatalf("after repeating run_id 1: the function ran %d times (%v), want once", len(got), got)
	}
	s.mustCLI("job", "run", "nightly")
	if got := runs(); strings.Join(got, ",") != "1,2" {
		t.Errorf("after raising run_id: runs %v, want [1 2]", got)
	}
	s.waitFor("both runs in the ledger", func() bool { return len(s.invocations("jobs/nightly/invocations")) == 2 })
	if recs := s.invocations("jobs/nightly/invocations"); recs[0].TriggerKind != "job" {
		t.Errorf("job invocations: %+v", recs)
	}

	// A server killed in the middle of run 3 does not run it again.
	code, body = s.api("PUT", "/v1/namespaces/default/jobs/nightly", "application/json",
		[]byte(`{"function": "batch", "payload": {"sleep": 3}, "run_id": 3}`))
	if code != 200 {
		t.Fatalf("PUT run_id 3: %d %s", code, body)
	}
	s.waitFor("run 3 to start", func() bool { return len(runs()) == 3 })
	s.crash()
	s.start()
	var job struct {
		Status struct {
			Phase      string `json:"phase"`
			RunID      int64  `json:"run_id"`
			Error      string `json:"error"`
			StatusCode int    `json:"status_code"`
		} `json:"status"`
	}
	s.waitFor("run 3 to be settled", func() bool {
		_, body := s.api("GET", "/v1/namespaces/default/jobs/nightly", "", nil)
		json.Unmarshal(body, &job)
		return job.Status.RunID == 3 && job.Status.Phase != "Running"
	})
	time.Sleep(4 * time.Second) // longer than the run would take
	if got := runs(); len(got) != 3 {
		t.Errorf("run 3 ran again after the restart: runs %v", got)
	}
	if job.Status.Phase != "Failed" || !strings.Contains(job.Status.Error, "raise run_id") {
		t.Errorf("run 3 after the crash: %+v; want Failed saying how to run it again", job.Status)
	}
	// The ledger has the interrupted run, and the job agrees with it.
	recs := s.invocations("jobs/nightly/invocations")
	if len(recs) != 3 || recs[0].StatusCode != 502 || recs[0].Error != "interrupted: the server stopped during the run" {
		t.Fatalf("job invocations after the crash: %+v; want 3, the newest a 502 saying the run was interrupted", recs)
	}
	if job.Status.StatusCode != 502 || !strings.HasPrefix(job.Status.Error, recs[0].Error) {
		t.Errorf("run 3 after the crash: %+v; want the status and error of its invocation %+v", job.Status, recs[0])
	}
}

func (r record) startedAt() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, r.StartedAt)
	return t
}
