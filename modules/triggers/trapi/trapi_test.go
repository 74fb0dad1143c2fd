package trapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/google/go-cmp/cmp"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/cron"
	"sless.kube5s.ru/sless/modules/triggers/rabbitmq"
	"sless.kube5s.ru/sless/modules/triggers/trstoretest"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// knownFunctions is a functions.Store holding ns/hello only; only Get is
// used.
type knownFunctions struct{ functions.Store }

func (knownFunctions) Get(_ context.Context, k functions.Key) (*functions.Function, error) {
	if k == (functions.Key{Namespace: "ns", Name: "hello"}) {
		return &functions.Function{Namespace: k.Namespace, Name: k.Name}, nil
	}
	return nil, functions.ErrNotFound
}

// queryLedger records the query of a list of invocations; only List is
// used.
type queryLedger struct {
	invoke.Ledger
	queries []invoke.Query
}

func (l *queryLedger) List(_ context.Context, _ string, q invoke.Query) ([]*invoke.Record, string, error) {
	l.queries = append(l.queries, q)
	return nil, "", nil
}

// server is the API on in-memory stores with the server's trigger types.
type server struct {
	t        *testing.T
	router   *gin.Engine
	triggers *trstoretest.Triggers
	jobs     *trstoretest.Jobs
	ledger   *queryLedger
	notified []string
}

func newServer(t *testing.T) *server {
	gin.SetMode(gin.TestMode)
	types, err := triggers.NewTypes([]triggers.Type{cron.Type{}, rabbitmq.Type{}}, triggers.Capabilities{})
	if err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, router: gin.New(), triggers: trstoretest.NewTriggers(), jobs: trstoretest.NewJobs(), ledger: &queryLedger{}}
	note := func(kind string) func(triggers.Key) {
		return func(k triggers.Key) { s.notified = append(s.notified, kind+" "+k.String()) }
	}
	api := New(s.triggers, s.jobs, knownFunctions{}, types, s.ledger, triggers.NotifierFuncs{Triggers: note("trigger"), Jobs: note("job")}, discard)
	api.Register(s.router.Group("/v1"), s.router)
	return s
}

// do sends a request and returns the status and the decoded body.
func (s *server) do(method, path, body string) (int, map[string]any) {
	s.t.Helper()
	w := httptest.NewRecorder()
	s.router.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
	var out map[string]any
	if w.Body.Len() > 0 {
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			s.t.Fatalf("%s %s: the body is not a JSON object: %s", method, path, w.Body)
		}
	}
	return w.Code, out
}

// TestAPI runs the calls of a user in order: each step is a request in and
// the status and parts of the body out.
func TestAPI(t *testing.T) {
	s := newServer(t)
	const triggersPath, jobsPath = "/v1/namespaces/ns/triggers", "/v1/namespaces/ns/jobs"
	steps := []struct {
		name, method, path, body string
		wantCode                 int
		// want holds fields of the body, by JSON name, with their value.
		want map[string]any
		// wantError is the error message.
		wantError string
	}{
		{name: "an http trigger gets its defaults", method: "POST", path: triggersPath,
			body:     `{"name": "web", "function": "hello", "type": "http"}`,
			wantCode: 201, want: map[string]any{"name": "web", "namespace": "ns", "auth": "none", "enabled": true, "generation": 1.0}},
		{name: "a second create conflicts", method: "POST", path: triggersPath,
			body:     `{"name": "web", "function": "hello", "type": "http"}`,
			wantCode: 409, wantError: `trigger "web" already exists in namespace "ns"; use PUT to update it`},
		{name: "a missing function is refused", method: "POST", path: triggersPath,
			body:     `{"name": "other", "function": "nope", "type": "http"}`,
			wantCode: 400, wantError: `invalid trigger: function: function "nope" does not exist in namespace "ns"`},
		{name: "bad fields are named, each", method: "POST", path: triggersPath,
			body:     `{"name": "Bad_Name", "function": "hello", "type": "cron", "schedule": "61 * * * *", "queue": "q"}`,
			wantCode: 400},
		{name: "a rabbitmq trigger is shown without its password", method: "POST", path: triggersPath,
			body:     `{"name": "orders", "function": "hello", "type": "rabbitmq", "url": "amqp://app:s3cret@broker/vh", "queue": "orders"}`,
			wantCode: 201, want: map[string]any{"url": "amqp://app:***@broker/vh", "prefetch": 10.0, "max_retries": 3.0}},
		{name: "the redacted URL sent back keeps the password", method: "PUT", path: triggersPath + "/orders",
			body:     `{"function": "hello", "type": "rabbitmq", "url": "amqp://app:***@broker/vh", "queue": "orders", "prefetch": 5}`,
			wantCode: 200, want: map[string]any{"url": "amqp://app:***@broker/vh", "prefetch": 5.0, "generation": 2.0}},
		{name: "a rename is refused", method: "PUT", path: triggersPath + "/orders",
			body:     `{"name": "renamed", "function": "hello", "type": "http"}`,
			wantCode: 400, wantError: `name "renamed" in the body does not match "orders" in the URL; triggers cannot be renamed`},
		{name: "get", method: "GET", path: triggersPath + "/web", wantCode: 200, want: map[string]any{"type": "http"}},
		{name: "get of a missing trigger", method: "GET", path: triggersPath + "/nope",
			wantCode: 404, wantError: `trigger "nope" not found in namespace "ns"`},
		{name: "update of a missing trigger", method: "PUT", path: triggersPath + "/nope",
			body: `{"function": "hello", "type": "http"}`, wantCode: 404, wantError: `trigger "nope" not found in namespace "ns"`},
		{name: "a page of one", method: "GET", path: triggersPath + "?limit=1", wantCode: 200, want: map[string]any{"continue": "orders"}},
		{name: "the invocations of an http trigger are its function's", method: "GET", path: triggersPath + "/web/invocations?status=error",
			wantCode: 200},
		{name: "the invocations of a rabbitmq trigger are its own", method: "GET", path: triggersPath + "/orders/invocations",
			wantCode: 200},
		{name: "an unknown parameter is refused", method: "GET", path: triggersPath + "/orders/invocations?function=x",
			wantCode: 400},
		{name: "delete", method: "DELETE", path: triggersPath + "/web", wantCode: 204},
		{name: "delete again", method: "DELETE", path: triggersPath + "/web",
			wantCode: 404, wantError: `trigger "web" not found in namespace "ns"`},
		{name: "a job", method: "POST", path: jobsPath, body: `{"name": "once", "function": "hello", "payload": { "a" : null }}`,
			wantCode: 201, want: map[string]any{"run_id": 0.0, "payload": map[string]any{"a": nil}}},
		{name: "a job with a negative run_id", method: "POST", path: jobsPath, body: `{"name": "neg", "function": "hello", "run_id": -1}`,
			wantCode: 400, wantError: "invalid job: run_id: must not be negative (0 means do not run)"},
		{name: "run it", method: "PUT", path: jobsPath + "/once", body: `{"function": "hello", "run_id": 1}`,
			wantCode: 200, want: map[string]any{"run_id": 1.0, "generation": 2.0}},
		{name: "the job's invocations", method: "GET", path: jobsPath + "/once/invocations?limit=5&continue=c1", wantCode: 200},
		{name: "update of a missing job", method: "PUT", path: jobsPath + "/nope", body: `{"function": "hello"}`,
			wantCode: 404, wantError: `job "nope" not found in namespace "ns"`},
		{name: "delete the job", method: "DELETE", path: jobsPath + "/once", wantCode: 204},
		{name: "the job is gone", method: "GET", path: jobsPath + "/once", wantCode: 404, wantError: `job "once" not found in namespace "ns"`},
	}
	for _, st := range steps {
		code, body := s.do(st.method, st.path, st.body)
		if code != st.wantCode {
			t.Fatalf("%s: %s %s = %d %v; want %d", st.name, st.method, st.path, code, body, st.wantCode)
		}
		for field, want := range st.want {
			if diff := cmp.Diff(want, body[field]); diff != "" {
				t.Errorf("%s: field %s (-want +got):\n%s", st.name, field, diff)
			}
		}
		if st.wantError != "" && body["error"] != st.wantError {
			t.Errorf("%s: error %q; want %q", st.name, body["error"], st.wantError)
		}
	}

	// What the answers hide is stored.
	stored, err := s.triggers.Get(context.Background(), triggers.Key{Namespace: "ns", Name: "orders"})
	if err != nil || stored.URL != "amqp://app:s3cret@broker/vh" {
		t.Errorf("stored URL %q, %v; want the password kept", stored.URL, err)
	}
	wantNotified := []string{"trigger ns/web", "trigger ns/orders", "trigger ns/orders", "trigger ns/web",
		"job ns/once", "job ns/once", "job ns/once"}
	if diff := cmp.Diff(wantNotified, s.notified); diff != "" {
		t.Errorf("reconcilers told (-want +got):\n%s", diff)
	}
	wantQueries := []invoke.Query{
		{Function: "hello", Status: "error", TriggerKind: triggers.TypeHTTP},
		{TriggerKind: triggers.TypeRabbitMQ, TriggerName: "orders"},
		{TriggerKind: invoke.KindJob, TriggerName: "once", Limit: 5, Continue: "c1"},
	}
	if diff := cmp.Diff(wantQueries, s.ledger.queries); diff != "" {
		t.Errorf("ledger queries (-want +got):\n%s", diff)
	}
}

// TestFieldErrors checks that a refused trigger lists every bad field.
// TestIngressNeedsTheKubernetesMode: the embedded mode's API refuses an
// http trigger with an ingress with a 400 that names the mode it needs, and
// stores and applies nothing.
func TestIngressNeedsTheKubernetesMode(t *testing.T) {
	s := newServer(t)
	code, body := s.do("POST", "/v1/namespaces/ns/triggers",
		`{"name": "web", "function": "hello", "type": "http", "ingress": {"host": "hello.example.com", "class_name": "nginx"}}`)
	if code != 400 {
		t.Fatalf("got %d %v; want 400", code, body)
	}
	msg, _ := body["error"].(string)
	if want := "ingress: needs the kubernetes mode (sless server --mode kubernetes)"; !strings.Contains(msg, want) {
		t.Errorf("error %q; want it to contain %q", msg, want)
	}
	if strings.Contains(msg, "IngressSpec") || strings.Contains(msg, "Capabilities") {
		t.Errorf("error %q names Go types", msg)
	}
	if code, _ := s.do("GET", "/v1/namespaces/ns/triggers/web", ""); code != 404 {
		t.Errorf("GET after the refused create: %d; want 404", code)
	}
	if len(s.notified) != 0 {
		t.Errorf("a refused create told the reconciler: %v", s.notified)
	}
}

func TestFieldErrors(t *testing.T) {
	s := newServer(t)
	code, body := s.do("POST", "/v1/namespaces/ns/triggers",
		`{"name": "Bad_Name", "function": "hello", "type": "cron", "schedule": "@every 1x", "queue": "q"}`)
	if code != 400 {
		t.Fatalf("got %d %v; want 400", code, body)
	}
	var fields []string
	for _, f := range body["fields"].([]any) {
		fields = append(fields, f.(map[string]any)["field"].(string))
	}
	if diff := cmp.Diff([]string{"name", "schedule", "queue"}, fields); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
	if len(s.notified) != 0 {
		t.Errorf("a refused create told the reconciler: %v", s.notified)
	}
}
