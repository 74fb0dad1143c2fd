package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/auth/webhook"
)

// cliAs runs the CLI against s with token instead of the server's own.
func (s *server) cliAs(token string, args ...string) (stdout, stderr string, err error) {
	return s.cliWithEnv([]string{"SLESS_TOKEN=" + token}, args...)
}

// newToken makes a tenant token with the CLI and returns its secret.
func (s *server) newToken(args ...string) string {
	s.t.Helper()
	return strings.TrimSpace(s.mustCLI(append([]string{"token", "create"}, args...)...))
}

// TestTenantIsolation checks that a tenant token acts only in its namespace:
// every route of another namespace answers 403 naming the namespace it may
// use, and nothing of the other namespace shows in its own.
func TestTenantIsolation(t *testing.T) {
	s := startServer(t, serverOptions{})
	hello := writeTree(t, map[string]string{"handler.py": "def handle(event, context):\n    return 'hi from ' + context.namespace\n"})
	s.mustCLI("deploy", hello, "-n", "team-b", "--name", "fb", "--runtime", "python3.11")
	s.mustCLI("job", "run", "jb", "-n", "team-b", "--function", "fb")
	code, body := s.api("GET", "/v1/namespaces/team-b/invocations", "", nil)
	var recs struct{ Items []record }
	if code != 200 || json.Unmarshal(body, &recs) != nil || len(recs.Items) == 0 {
		t.Fatalf("team-b invocations: %d %s", code, body)
	}
	otherID := recs.Items[0].ID
	_, before := s.getFunction("team-b", "fb")

	tokenA := s.newToken("--namespace", "team-a", "--description", "team a")
	if out, errOut, err := s.cliAs(tokenA, "deploy", hello, "--name", "fa", "--runtime", "python3.11"); err != nil {
		t.Fatalf("team-a deploys into its own namespace (the token's): %v\n%s\n%s", err, out, errOut)
	}
	if code, body := s.apiWithToken(tokenA, "GET", "/v1/whoami", "", nil); code != 200 || !strings.Contains(string(body), `"namespace":"team-a"`) {
		t.Errorf("whoami: %d %s", code, body)
	}

	fn := []byte(`{"name": "x", "runtime": "python3.11"}`)
	trigger := []byte(`{"name": "x", "function": "fb", "type": "http"}`)
	job := []byte(`{"name": "x", "function": "fb"}`)
	routes := []struct {
		method, path string
		body         []byte
	}{
		{"POST", "functions", fn},
		{"GET", "functions", nil},
		{"GET", "functions/fb", nil},
		{"PUT", "functions/fb", fn},
		{"DELETE", "functions/fb", nil},
		{"POST", "functions/fb/upload", zipOf(t, map[string]string{"handler.py": "def handle(e, c):\n    return 'pwned'\n"})},
		{"POST", "functions/fb/invoke", nil},
		{"GET", "functions/fb/invocations", nil},
		{"GET", "invocations", nil},
		{"GET", "invocations/" + otherID, nil},
		{"POST", "triggers", trigger},
		{"GET", "triggers", nil},
		{"GET", "triggers/fb", nil},
		{"PUT", "triggers/fb", trigger},
		{"DELETE", "triggers/fb", nil},
		{"GET", "triggers/fb/invocations", nil},
		{"POST", "jobs", job},
		{"GET", "jobs", nil},
		{"GET", "jobs/jb", nil},
		{"PUT", "jobs/jb", job},
		{"DELETE", "jobs/jb", nil},
		{"GET", "jobs/jb/invocations", nil},
	}
	for _, r := range routes {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			ct := "application/json"
			if strings.HasSuffix(r.path, "/upload") {
				ct = "application/zip"
			}
			code, body := s.apiWithToken(tokenA, r.method, "/v1/namespaces/team-b/"+r.path, ct, r.body)
			if code != 403 || !strings.Contains(string(body), `it may act only in namespace \"team-a\"`) {
				t.Errorf("got %d %s; want 403 naming namespace team-a", code, body)
			}
			if strings.Contains(string(body), "fb") || strings.Contains(string(body), otherID) {
				t.Errorf("the refusal tells something of team-b: %s", body)
			}
		})
	}

	// Nothing of team-b shows through team-a's own routes.
	own := []struct {
		path string
		code int
	}{
		{"functions", 200}, {"triggers", 200}, {"jobs", 200}, {"invocations", 200},
		{"functions/fb", 404}, {"triggers/fb", 404}, {"jobs/jb", 404}, {"invocations/" + otherID, 404},
		{"functions/fb/invocations", 200}, {"invocations?function=fb", 200},
	}
	for _, o := range own {
		code, body := s.apiWithToken(tokenA, "GET", "/v1/namespaces/team-a/"+o.path, "", nil)
		if code != o.code || strings.Contains(string(body), "team-b") || strings.Contains(string(body), `"fb"`) {
			t.Errorf("GET team-a/%s: %d %s; want %d without anything of team-b", o.path, code, body, o.code)
		}
	}
	// A trigger of team-a cannot name team-b's function.
	code, body = s.apiWithToken(tokenA, "POST", "/v1/namespaces/team-a/triggers", "application/json", trigger)
	if code != 400 || !strings.Contains(string(body), `function \"fb\" does not exist in namespace \"team-a\"`) {
		t.Errorf("trigger on another namespace's function: %d %s", code, body)
	}
	// code_sha256 in a body is ignored: team-a cannot run team-b's code by its hash.
	steal := []byte(`{"name": "steal", "runtime": "python3.11", "code_sha256": "` + before.CodeSHA256 + `"}`)
	for _, m := range []string{"POST", "PUT"} {
		path := "/v1/namespaces/team-a/functions"
		if m == "PUT" {
			path += "/steal"
		}
		code, body := s.apiWithToken(tokenA, m, path, "application/json", steal)
		var got function
		if code >= 300 || json.Unmarshal(body, &got) != nil || got.CodeSHA256 != "" || got.Status.Phase != "Pending" {
			t.Errorf("%s with another namespace's code_sha256: %d %s; want it ignored (no code, Pending)", m, code, body)
		}
	}
	// Tenants do not manage tokens.
	if _, errOut, err := s.cliAs(tokenA, "token", "list"); err == nil || !strings.Contains(errOut, "only an admin token") {
		t.Errorf("token list as a tenant: %v %s; want a refusal", err, errOut)
	}
	if _, after := s.getFunction("team-b", "fb"); after.Generation != before.Generation || after.CodeSHA256 != before.CodeSHA256 {
		t.Errorf("team-b's function changed: %+v, was %+v", after, before)
	}

	// Revocation is effective on the next request.
	var listed []struct{ ID, Namespace, Description string }
	if err := json.Unmarshal([]byte(s.mustCLI("token", "list", "-o", "json")), &listed); err != nil || len(listed) != 1 || listed[0].Description != "team a" {
		t.Fatalf("token list: %+v, %v", listed, err)
	}
	s.mustCLI("token", "revoke", listed[0].ID)
	if code, body := s.apiWithToken(tokenA, "GET", "/v1/whoami", "", nil); code != http.StatusUnauthorized {
		t.Errorf("revoked token: %d %s; want 401", code, body)
	}

	// An expired token fails.
	short := s.newToken("--namespace", "team-a", "--ttl", "1s")
	testenv.Eventually(t, 30*time.Second, "the 1s token to expire", func() bool {
		code, body := s.apiWithToken(short, "GET", "/v1/whoami", "", nil)
		return code == http.StatusUnauthorized && strings.Contains(string(body), "expired")
	})
}

// TestWebhookTokens checks tokens that an identity service reviews: its
// answer decides the namespace, its refusal is a 401, and when it is down a
// token the server does not know gets 503 while the server's own and stored
// tokens keep working.
func TestWebhookTokens(t *testing.T) {
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rev webhook.Review
		if r.Header.Get("Authorization") != "Bearer idp-secret-0123" || json.NewDecoder(r.Body).Decode(&rev) != nil {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		if ns, ok := strings.CutPrefix(rev.Spec.Token, "idp-"); ok {
			rev.Status = webhook.ReviewStatus{Authenticated: true,
				User: webhook.UserInfo{Username: "u-" + ns, Extra: map[string][]string{webhook.NamespaceKey: {ns}}}}
		}
		json.NewEncoder(w).Encode(rev)
	}))
	defer idp.Close()
	s := startServer(t, serverOptions{env: []string{"SLESS_AUTH_WEBHOOK_URL=" + idp.URL, "SLESS_AUTH_WEBHOOK_TOKEN=idp-secret-0123",
		"SLESS_AUTH_WEBHOOK_TIMEOUT=2s", "SLESS_AUTH_WEBHOOK_NEGATIVE_CACHE_TTL=1ms"}})
	stored := s.newToken("--namespace", "team-s")

	checks := []struct {
		token, path string
		code        int
		want        string
	}{
		{"idp-team-a", "/v1/whoami", 200, `"namespace":"team-a"`},
		{"idp-team-a", "/v1/namespaces/team-a/functions", 200, `"items":[]`},
		{"idp-team-a", "/v1/namespaces/team-b/functions", 403, `it may act only in namespace \"team-a\"`},
		{"idp-team-a", "/v1/tokens", 403, "only an admin token"},
		{"nobody", "/v1/whoami", 401, "invalid API token"},
		{stored, "/v1/whoami", 200, `"namespace":"team-s"`},
	}
	for _, c := range checks {
		if code, body := s.apiWithToken(c.token, "GET", c.path, "", nil); code != c.code || !strings.Contains(string(body), c.want) {
			t.Errorf("GET %s with %.10s: %d %s; want %d containing %s", c.path, c.token, code, body, c.code, c.want)
		}
	}

	idp.Close()
	code, body := s.apiWithToken("idp-team-c", "GET", "/v1/whoami", "", nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "identity service is unavailable") {
		t.Errorf("a new token while the identity service is down: %d %s; want 503", code, body)
	}
	// The three requests since "nobody" was refused can take less than
	// the refusal's 1 ms in the cache.
	time.Sleep(5 * time.Millisecond)
	if code, body := s.apiWithToken("nobody", "GET", "/v1/whoami", "", nil); code != http.StatusServiceUnavailable {
		t.Errorf("an unknown token whose refusal expired, while the service is down: %d %s; want 503, not a silent answer", code, body)
	}
	for _, tok := range []string{s.token, stored} {
		if code, body := s.apiWithToken(tok, "GET", "/v1/whoami", "", nil); code != 200 {
			t.Errorf("a token the server knows while the identity service is down: %d %s; want 200", code, body)
		}
	}
}

// fnAs calls /fn with an optional Authorization header.
func (s *server) fnAs(authorization, path string) (int, string) {
	s.t.Helper()
	code, body := s.request("POST", path, "application/json", authorization, []byte(`{}`))
	return code, string(body)
}

// TestPrivateFunction checks an http trigger with auth "token": /fn refuses
// callers without a token that may invoke the function before anything
// starts an instance, and the function never sees the token.
func TestPrivateFunction(t *testing.T) {
	s := startServer(t, serverOptions{})
	dir := writeTree(t, map[string]string{"handler.py": `def handle(event, context):
    return {"sees_token": any(k.lower() == "authorization" for k in context.headers)}
`})
	s.mustCLI("deploy", dir, "--name", "priv", "--runtime", "python3.11", "--http=false")
	s.mustCLI("deploy", dir, "--name", "pub", "--runtime", "python3.11")
	s.mustCLI("trigger", "create", "priv", "--function", "priv", "--type", "http", "--auth", "token")

	tenant := s.newToken("--namespace", "default")
	other := s.newToken("--namespace", "team-b")
	invoker := s.newToken("--namespace", "default", "--function", "priv")
	otherInvoker := s.newToken("--namespace", "default", "--function", "pub")
	refusals := []struct {
		name, authorization string
		code                int
		want                string
	}{
		{"no token", "", 401, `function \"priv\" is private`},
		{"another scheme", "Basic " + tenant, 401, `function \"priv\" is private`},
		{"unknown token", "Bearer nope", 401, "invalid API token"},
		{"another namespace's token", "Bearer " + other, 403, `may not invoke function \"priv\"`},
		{"another function's invoker token", "Bearer " + otherInvoker, 403, `may not invoke function \"priv\"`},
	}
	for _, r := range refusals {
		if code, body := s.fnAs(r.authorization, "/fn/default/priv"); code != r.code || !strings.Contains(body, r.want) {
			t.Errorf("%s: %d %s; want %d containing %s", r.name, code, body, r.code, r.want)
		}
	}
	// The refusals woke nothing and recorded nothing: the first call let in
	// is a cold start.
	if recs := s.invocations("functions/priv/invocations"); len(recs) != 0 {
		t.Errorf("refused calls were recorded: %+v", recs)
	}
	code, body := s.fnAs("bearer "+tenant, "/fn/default/priv")
	if code != 200 || body != `{"sees_token":false}` {
		t.Fatalf("tenant token: %d %s; want 200 and a handler that does not see the token", code, body)
	}
	s.waitFor("the first invocation's record", func() bool { return len(s.invocations("functions/priv/invocations")) == 1 })
	if rec := s.invocations("functions/priv/invocations")[0]; !rec.ColdStart {
		t.Errorf("the first call let in was warm: a refused call started an instance (%+v)", rec)
	}
	for name, authorization := range map[string]string{"invoker token": "Bearer " + invoker, "admin token": "Bearer " + s.token} {
		if code, body := s.fnAs(authorization, "/fn/default/priv"); code != 200 {
			t.Errorf("%s: %d %s; want 200", name, code, body)
		}
	}
	// The default stays public, and a public function keeps its caller's
	// Authorization header.
	if code, body := s.fnAs("Bearer the-callers-own", "/fn/default/pub"); code != 200 || body != `{"sees_token":true}` {
		t.Errorf("public function: %d %s; want 200 with the caller's header", code, body)
	}
	if code, body := s.fnAs("", "/fn/default/pub"); code != 200 {
		t.Errorf("public function without a token: %d %s", code, body)
	}
	// Making the trigger public again opens the function to anyone.
	s.mustCLI("trigger", "delete", "priv")
	s.mustCLI("trigger", "create", "priv", "--function", "priv", "--type", "http")
	if code, body := s.fnAs("", "/fn/default/priv"); code != 200 {
		t.Errorf("after the trigger became public: %d %s", code, body)
	}
}

// TestTokenListPages checks that GET /v1/tokens pages as every list does,
// that the CLI follows the pages, and that no token is made for a namespace
// Kubernetes keeps for itself.
func TestTokenListPages(t *testing.T) {
	s := startServer(t, serverOptions{})
	for _, ns := range []string{"team-a", "team-b", "team-c"} {
		s.newToken("--namespace", ns)
	}
	seen := map[string]bool{}
	path := "/v1/tokens?limit=2"
	for pages := 1; ; pages++ {
		code, body := s.api("GET", path, "", nil)
		var page struct {
			Items []struct {
				ID        string `json:"id"`
				Namespace string `json:"namespace"`
			} `json:"items"`
			Continue string `json:"continue"`
		}
		if code != 200 || json.Unmarshal(body, &page) != nil || len(page.Items) > 2 {
			t.Fatalf("GET %s: %d %s; want a page of at most 2", path, code, body)
		}
		for _, it := range page.Items {
			seen[it.Namespace] = true
		}
		if page.Continue == "" {
			if pages != 2 {
				t.Errorf("%d pages of 2 for 3 tokens, want 2", pages)
			}
			break
		}
		path = "/v1/tokens?limit=2&continue=" + page.Continue
	}
	if len(seen) != 3 {
		t.Errorf("pages held the tokens of %v, want team-a, team-b and team-c", seen)
	}
	if out := s.mustCLI("token", "list"); strings.Count(out, "team-") != 3 {
		t.Errorf("sless token list shows %d tokens, want 3:\n%s", strings.Count(out, "team-"), out)
	}
	code, body := s.api("POST", "/v1/tokens", "application/json", []byte(`{"namespace": "kube-system"}`))
	if code != 400 || !strings.Contains(string(body), `namespace: \"kube-system\" starts with \"kube-\"`) {
		t.Errorf("token for kube-system: %d %s; want 400 naming the reserved prefix", code, body)
	}
}
