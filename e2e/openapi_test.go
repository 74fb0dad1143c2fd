package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"

	"sless.kube5s.ru/sless/docs"
)

// TestCLIFollowsTheOpenAPIDocument runs the CLI's commands through a proxy
// that checks every request it sends, and every answer of the real server,
// against docs/openapi.json: the operation exists, its parameters and JSON
// bodies match their schemas. The CLI is the API's first client; what it
// sends and gets is what the document promises other clients.
func TestCLIFollowsTheOpenAPIDocument(t *testing.T) {
	s := startServer(t, serverOptions{})
	doc, err := openapi3.NewLoader().LoadFromData(docs.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	openapi3filter.RegisterBodyDecoder("application/zip", openapi3filter.FileBodyDecoder)
	target, _ := url.Parse(s.endpoint)
	opts := &openapi3filter.Options{
		AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
		// A client that read an object may send it back whole; the server
		// ignores its read-only fields, as the document says.
		ExcludeReadOnlyValidations: true,
		IncludeResponseStatus:      true,
		MultiError:                 true,
	}
	var mu sync.Mutex
	var problems []string
	seen := map[string]bool{}
	problem := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(resp *http.Response) error {
		in, _ := resp.Request.Context().Value(validationKey{}).(*openapi3filter.RequestValidationInput)
		if in == nil {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(body)), Options: opts})
		if err != nil {
			problem("the answer %d to %s %s does not match the document: %v\n%s", resp.StatusCode, in.Request.Method, in.Request.URL, err, body)
		}
		return nil
	}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		check := r.Clone(r.Context())
		check.URL.Scheme, check.URL.Host = "", ""
		route, params, err := router.FindRoute(check)
		if err != nil {
			problem("the CLI sent %s %s, which the document does not have: %v", r.Method, r.URL.Path, err)
			http.Error(w, "undocumented", http.StatusNotFound)
			return
		}
		mu.Lock()
		seen[route.Operation.OperationID] = true
		mu.Unlock()
		check.Body = io.NopCloser(bytes.NewReader(body))
		in := &openapi3filter.RequestValidationInput{Request: check, PathParams: params, Route: route, Options: opts}
		if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
			problem("the CLI's %s %s does not match the document: %v\n%s", r.Method, r.URL, err, body)
		}
		in.Request.Body = nil
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), validationKey{}, in)))
	}))
	defer front.Close()

	env := []string{"SLESS_ENDPOINT=" + front.URL, "SLESS_TOKEN=" + s.token}
	run := func(args ...string) string {
		t.Helper()
		out, errOut, err := s.cliWithEnv(env, args...)
		if err != nil {
			t.Fatalf("sless %s: %v\n%s\n%s", strings.Join(args, " "), err, out, errOut)
		}
		return out
	}
	run("deploy", "../examples/hello-python", "--name", "hello", "--runtime", "python3.11", "--env", "A=b")
	run("fn", "list")
	run("fn", "get", "hello")
	run("invoke", "hello", "-d", `{"name": "openapi"}`)
	run("invocations", "hello")
	run("logs", "hello")
	run("trigger", "create", "nightly", "--function", "hello", "--type", "cron", "--schedule", "@daily")
	run("trigger", "list")
	run("trigger", "disable", "hello")
	run("trigger", "get", "hello")
	run("trigger", "delete", "nightly")
	run("job", "run", "once", "--function", "hello", "--payload", `{"name": "job"}`)
	run("job", "list")
	run("job", "get", "once")
	run("top", "--once", "--interval", "500ms")
	secret := strings.TrimSpace(run("token", "create", "--namespace", "team-a", "--description", "openapi"))
	if !strings.HasPrefix(secret, "sless_") {
		t.Fatalf("token create printed %q", secret)
	}
	run("token", "list")
	run("fn", "delete", "hello")

	for _, p := range problems {
		t.Error(p)
	}
	var ids []string
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	t.Logf("the CLI used %d operations, all documented: %s", len(ids), strings.Join(ids, ", "))
}

type validationKey struct{}
