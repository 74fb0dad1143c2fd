package tokens

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx/fxtest"

	"sless.kube5s.ru/sless/modules/auth"
	"sless.kube5s.ru/sless/modules/server"
	"sless.kube5s.ru/sless/modules/server/httpx"
)

const admin = "admin-token-0123456789"

type nsRoute struct{}

func (nsRoute) Register(v1 *gin.RouterGroup, _ *gin.Engine) {
	v1.GET("/namespaces/:ns/things", func(c *gin.Context) { c.JSON(200, gin.H{"ns": c.Param("ns")}) })
}

func newServer(t *testing.T) http.Handler {
	t.Helper()
	store := newStore(t, "sqlite:"+filepath.Join(t.TempDir(), "db.sqlite"))
	return server.New(server.Params{
		Config:   server.Config{Listen: "127.0.0.1:0"},
		Auth:     auth.Chain{auth.NewStaticToken(admin), store},
		Routes:   []httpx.Routes{NewAPI(store, discard), nsRoute{}},
		Registry: prometheus.NewRegistry(),
		Log:      discard,
		LC:       fxtest.NewLifecycle(t),
	}).Handler()
}

func call(t *testing.T, h http.Handler, token, method, path, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func mustCreate(t *testing.T, h http.Handler, body string) auth.NewToken {
	t.Helper()
	code, resp := call(t, h, admin, "POST", "/v1/tokens", body)
	var created auth.NewToken
	if code != 201 || json.Unmarshal([]byte(resp), &created) != nil || created.Secret == "" {
		t.Fatalf("creating a token: %d %s", code, resp)
	}
	return created
}

func TestTokenAPI(t *testing.T) {
	h := newServer(t)
	tenant := mustCreate(t, h, `{"namespace": "team-a", "description": "ci", "ttl_seconds": 3600}`)
	invoker := mustCreate(t, h, `{"namespace": "team-a", "function": "hook"}`)
	if tenant.ExpiresAt == nil || invoker.ExpiresAt != nil {
		t.Fatalf("expiry: tenant %v, invoker %v; want one in an hour and none", tenant.ExpiresAt, invoker.ExpiresAt)
	}
	tests := []struct {
		name, token, method, path, body string
		code                            int
		want                            string
	}{
		{"tenant whoami", tenant.Secret, "GET", "/v1/whoami", "", 200, `{"namespace":"team-a"}`},
		{"invoker whoami", invoker.Secret, "GET", "/v1/whoami", "", 200, `{"namespace":"team-a","function":"hook"}`},
		{"tenant in its namespace", tenant.Secret, "GET", "/v1/namespaces/team-a/things", "", 200, `"ns":"team-a"`},
		{"tenant elsewhere", tenant.Secret, "GET", "/v1/namespaces/team-b/things", "", 403, `may act only in namespace \"team-a\"`},
		{"invoker on the API", invoker.Secret, "GET", "/v1/namespaces/team-a/things", "", 403, `only invokes function \"hook\"`},
		{"tenant lists tokens", tenant.Secret, "GET", "/v1/tokens", "", 403, "only an admin token"},
		{"tenant makes a token", tenant.Secret, "POST", "/v1/tokens", `{"namespace": "team-b"}`, 403, "only an admin token"},
		{"tenant revokes a token", tenant.Secret, "DELETE", "/v1/tokens/" + invoker.ID, "", 403, "only an admin token"},
		{"admin lists tokens", admin, "GET", "/v1/tokens", "", 200, `"description":"ci"`},
		{"list shows no secret", admin, "GET", "/v1/tokens", "", 200, `"namespace":"team-a"`},
		{"no namespace", admin, "POST", "/v1/tokens", `{}`, 400, `namespace`},
		{"bad namespace", admin, "POST", "/v1/tokens", `{"namespace": "Team A"}`, 400, `namespace`},
		{"negative ttl", admin, "POST", "/v1/tokens", `{"namespace": "a", "ttl_seconds": -1}`, 400, `ttl_seconds`},
		{"long description", admin, "POST", "/v1/tokens", `{"namespace": "a", "description": "` + strings.Repeat("x", 201) + `"}`, 400, `description`},
		{"unknown field", admin, "POST", "/v1/tokens", `{"namespace": "a", "ttl": "1h"}`, 400, `unknown field \"ttl\"`},
		{"revoke unknown", admin, "DELETE", "/v1/tokens/tok_nope", "", 404, `token \"tok_nope\" not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := call(t, h, tt.token, tt.method, tt.path, tt.body)
			if code != tt.code || !strings.Contains(body, tt.want) {
				t.Errorf("got %d %s; want %d containing %s", code, body, tt.code, tt.want)
			}
			if strings.Contains(body, tenant.Secret) || strings.Contains(body, invoker.Secret) {
				t.Errorf("the answer shows a token's secret: %s", body)
			}
		})
	}

	if code, body := call(t, h, admin, "DELETE", "/v1/tokens/"+tenant.ID, ""); code != 204 {
		t.Fatalf("revoke: %d %s", code, body)
	}
	if code, body := call(t, h, tenant.Secret, "GET", "/v1/whoami", ""); code != 401 || !strings.Contains(body, "invalid API token") {
		t.Errorf("revoked token on the next request: %d %s; want 401", code, body)
	}
	if code, _ := call(t, h, invoker.Secret, "GET", "/v1/whoami", ""); code != 200 {
		t.Errorf("revoking one token broke another: %d", code)
	}
}
