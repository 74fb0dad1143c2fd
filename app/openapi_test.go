package app

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gin-gonic/gin"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"sless.kube5s.ru/sless/docs"
	"sless.kube5s.ru/sless/internal/openapi"
	"sless.kube5s.ru/sless/modules/server"
)

// startEmbedded starts the whole embedded server and returns its address
// and its admin token.
func startEmbedded(t *testing.T) (*server.Server, string) {
	t.Helper()
	cfg := testConfig(t)
	token, lock, err := Prepare(cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Unlock() })
	var srv *server.Server
	app := fxtest.New(t, Options(cfg, token, discard), fx.Populate(&srv))
	app.RequireStart()
	t.Cleanup(app.RequireStop)
	return srv, token
}

// TestOpenAPIMatchesRoutes: every route the server serves under /v1 and
// /fn (and /healthz, /readyz, /metrics) is in the OpenAPI document with its
// methods, and the document has no operation the server does not serve.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	srv, _ := startEmbedded(t)
	served := map[string]bool{}
	for _, r := range srv.Handler().(*gin.Engine).Routes() {
		if strings.HasPrefix(r.Path, "/v1/") || strings.HasPrefix(r.Path, "/fn/") ||
			slices.Contains([]string{"/healthz", "/readyz", "/metrics"}, r.Path) {
			served[r.Method+" "+r.Path] = true
		}
	}
	documented := map[string]bool{}
	for _, op := range openapi.Operations {
		for _, m := range op.Methods() {
			documented[m+" "+op.Path] = true
		}
	}
	for r := range served {
		if !documented[r] {
			t.Errorf("route %s is not in the OpenAPI document: add it to internal/openapi/api.go and run hack/generate.sh", r)
		}
	}
	for r := range documented {
		if !served[r] {
			t.Errorf("the OpenAPI document has %s, which the server does not serve", r)
		}
	}
}

// TestOpenAPIDescribesResponses calls the real server and checks each
// answer against the schema the document gives for its operation and
// status, so that a field the handlers send and the document lacks (or the
// other way round) fails here.
func TestOpenAPIDescribesResponses(t *testing.T) {
	srv, token := startEmbedded(t)
	base := "http://" + srv.Addr().String()
	doc, err := openapi3.NewLoader().LoadFromData(docs.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}

	// The document is public and is what the server embeds.
	resp, err := http.Get(base + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(served, docs.OpenAPI) || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json without a token: %d %s, want 200 and docs/openapi.json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}

	var tenant string
	for _, c := range []struct {
		method, path, template, body string
		tok                          *string
		want                         int
	}{
		{"GET", "/v1/whoami", "", "", &token, 200},
		{"GET", "/v1/whoami", "", "", nil, 401},
		{"GET", "/v1/runtimes", "", "", &token, 200},
		{"POST", "/v1/namespaces/default/functions", "/v1/namespaces/{ns}/functions", `{"name": "f1", "runtime": "python3.11", "env": {"A": "b"}}`, &token, 201},
		{"POST", "/v1/namespaces/default/functions", "/v1/namespaces/{ns}/functions", `{"name": "f1", "runtime": "python3.11"}`, &token, 409},
		{"POST", "/v1/namespaces/default/functions", "/v1/namespaces/{ns}/functions", `{"name": "F!", "runtime": "cobol"}`, &token, 400},
		{"GET", "/v1/namespaces/default/functions", "/v1/namespaces/{ns}/functions", "", &token, 200},
		{"GET", "/v1/namespaces/default/functions/f1", "/v1/namespaces/{ns}/functions/{name}", "", &token, 200},
		{"GET", "/v1/namespaces/default/functions/nope", "/v1/namespaces/{ns}/functions/{name}", "", &token, 404},
		{"PUT", "/v1/namespaces/default/functions/f1", "/v1/namespaces/{ns}/functions/{name}", `{"runtime": "python3.11", "timeout_seconds": 5}`, &token, 200},
		{"POST", "/v1/namespaces/default/triggers", "/v1/namespaces/{ns}/triggers", `{"name": "t1", "function": "f1", "type": "http"}`, &token, 201},
		{"POST", "/v1/namespaces/default/triggers", "/v1/namespaces/{ns}/triggers", `{"name": "c1", "function": "f1", "type": "cron", "schedule": "@every 1h", "payload": {"x": 1}}`, &token, 201},
		{"PUT", "/v1/namespaces/default/triggers/t1", "/v1/namespaces/{ns}/triggers/{name}", `{"function": "f1", "type": "http", "enabled": false}`, &token, 200},
		{"GET", "/v1/namespaces/default/triggers", "/v1/namespaces/{ns}/triggers", "", &token, 200},
		{"GET", "/v1/namespaces/default/triggers/t1/invocations?limit=5", "/v1/namespaces/{ns}/triggers/{name}/invocations", "", &token, 200},
		{"POST", "/v1/namespaces/default/jobs", "/v1/namespaces/{ns}/jobs", `{"name": "j1", "function": "f1"}`, &token, 201},
		{"GET", "/v1/namespaces/default/jobs", "/v1/namespaces/{ns}/jobs", "", &token, 200},
		{"GET", "/v1/namespaces/default/jobs/j1", "/v1/namespaces/{ns}/jobs/{name}", "", &token, 200},
		{"GET", "/v1/namespaces/default/functions/f1/invocations?status=error", "/v1/namespaces/{ns}/functions/{name}/invocations", "", &token, 200},
		{"GET", "/v1/namespaces/default/invocations?bogus=1", "/v1/namespaces/{ns}/invocations", "", &token, 400},
		{"GET", "/v1/namespaces/default/invocations/0190c3c4-0000-7000-8000-000000000000", "/v1/namespaces/{ns}/invocations/{id}", "", &token, 404},
		{"GET", "/v1/namespaces/default/stats", "/v1/namespaces/{ns}/stats", "", &token, 200},
		{"POST", "/v1/tokens", "", `{"namespace": "team-a", "description": "for the test"}`, &token, 201},
		{"GET", "/v1/tokens", "", "", &token, 200},
		{"GET", "/v1/namespaces/default/functions", "/v1/namespaces/{ns}/functions", "", &tenant, 403},
		{"GET", "/v1/tokens", "", "", &tenant, 403},
		{"DELETE", "/v1/namespaces/default/jobs/j1", "/v1/namespaces/{ns}/jobs/{name}", "", &token, 204},
		{"DELETE", "/v1/namespaces/default/functions/f1", "/v1/namespaces/{ns}/functions/{name}", "", &token, 200},
		{"POST", "/fn/default/f1", "/fn/{ns}/{name}", `{}`, nil, 404},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
		if c.tok != nil {
			req.Header.Set("Authorization", "Bearer "+*c.tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s: got %d %s, want %d", c.method, c.path, resp.StatusCode, body, c.want)
			continue
		}
		template := c.template
		if template == "" {
			template, _, _ = strings.Cut(c.path, "?")
		}
		op := doc.Paths.Value(template).GetOperation(c.method)
		if op == nil {
			t.Errorf("%s %s is not in the document", c.method, template)
			continue
		}
		ref := op.Responses.Status(resp.StatusCode)
		if ref == nil {
			t.Errorf("%s %s: the document has no response %d", c.method, template, resp.StatusCode)
			continue
		}
		media := ref.Value.Content.Get("application/json")
		if len(body) == 0 {
			if media != nil {
				t.Errorf("%s %s: %d has no body; the document describes one", c.method, template, resp.StatusCode)
			}
			continue
		}
		if media == nil {
			t.Errorf("%s %s: the document has no JSON body for %d", c.method, template, resp.StatusCode)
			continue
		}
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		if err := media.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse()); err != nil {
			t.Errorf("%s %s: the %d answer does not match the document: %v\n%s", c.method, c.path, resp.StatusCode, err, body)
		}
		if c.path == "/v1/tokens" && c.method == "POST" {
			var nt struct{ Token string }
			json.Unmarshal(body, &nt)
			tenant = nt.Token
		}
	}
}
