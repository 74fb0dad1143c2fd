package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDeleteFunctionDeletesItsTriggersAndJobs deletes a function that has an
// http trigger, a firing cron trigger and a job: the answer lists them, they
// are gone, and none of them comes back to life (public on /fn, firing) when
// a function of the same name is created again.
func TestDeleteFunctionDeletesItsTriggersAndJobs(t *testing.T) {
	s := startServer(t, serverOptions{})
	s.mustCLI("deploy", "../examples/hello-python", "--name", "hello", "--runtime", "python3.11")
	s.mustCLI("trigger", "create", "tick", "--function", "hello", "--type", "cron", "--schedule", "@every 1s", "--payload", `{"name": "cron"}`)
	if code, body := s.api("POST", "/v1/namespaces/default/jobs", "application/json", []byte(`{"name": "once", "function": "hello", "run_id": 0}`)); code != http.StatusCreated {
		t.Fatalf("creating a job: HTTP %d %s", code, body)
	}
	s.waitFor("the cron trigger to fire", func() bool { return len(s.invocations("triggers/tick/invocations")) >= 1 })

	code, body := s.api("DELETE", "/v1/namespaces/default/functions/hello", "", nil)
	deletedAt := time.Now()
	var answer struct {
		Name    string              `json:"name"`
		Deleted map[string][]string `json:"deleted"`
	}
	if err := json.Unmarshal(body, &answer); code != http.StatusOK || err != nil {
		t.Errorf("DELETE: HTTP %d %s (%v); want 200 with what was deleted", code, body, err)
	} else if answer.Name != "hello" || !slices.Equal(answer.Deleted["triggers"], []string{"hello", "tick"}) ||
		!slices.Equal(answer.Deleted["jobs"], []string{"once"}) {
		t.Errorf("DELETE answered %s; want the function with triggers hello, tick and job once", body)
	}
	for _, path := range []string{"functions/hello", "triggers/hello", "triggers/tick", "jobs/once"} {
		if code, body := s.api("GET", "/v1/namespaces/default/"+path, "", nil); code != http.StatusNotFound {
			t.Errorf("GET %s after the function's deletion: HTTP %d %s; want 404", path, code, body)
		}
	}

	// The same name again, without an http trigger: the old one must not
	// expose it, and the old cron trigger must not run it.
	s.mustCLI("deploy", "../examples/hello-python", "--name", "hello", "--runtime", "python3.11", "--http=false")
	if code, _, body := s.post("/fn/default/hello", `{"name": "anyone"}`); code != http.StatusNotFound {
		t.Errorf("/fn of the re-created function without an http trigger: HTTP %d %s; want 404", code, body)
	}
	s.mustCLI("trigger", "create", "probe", "--function", "hello", "--type", "cron", "--schedule", "@every 1s")
	s.waitFor("the new cron trigger to fire twice", func() bool { return len(s.invocations("triggers/probe/invocations")) >= 2 })
	for _, r := range s.invocations("invocations?trigger_kind=cron&trigger_name=tick") {
		if r.startedAt().After(deletedAt) {
			t.Errorf("the deleted cron trigger fired at %s, after the function's deletion at %s", r.StartedAt, deletedAt.UTC().Format(time.RFC3339Nano))
		}
	}

	if code, body := s.api("POST", "/v1/namespaces/default/functions", "application/json", []byte(`{"name": "lonely", "runtime": "nodejs20"}`)); code != http.StatusCreated {
		t.Fatalf("creating a function: HTTP %d %s", code, body)
	}
	want := `{"name":"lonely","namespace":"default","deleted":{"jobs":[],"triggers":[]}}`
	if code, body := s.api("DELETE", "/v1/namespaces/default/functions/lonely", "", nil); code != http.StatusOK || string(body) != want {
		t.Errorf("DELETE of a function without triggers or jobs: HTTP %d %s; want 200 %s", code, body, want)
	}

	_, errOut, err := s.cli("fn", "delete", "hello")
	if err != nil || !strings.Contains(errOut, "deleted function default/hello and its trigger probe") {
		t.Errorf("fn delete: %v, stderr %q; want it to name the deleted trigger", err, errOut)
	}
}
