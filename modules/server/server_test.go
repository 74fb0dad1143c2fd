package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx/fxtest"

	"sless.kube5s.ru/sless/internal/procs"
	"sless.kube5s.ru/sless/modules/auth"
	"sless.kube5s.ru/sless/modules/server"
	"sless.kube5s.ru/sless/modules/server/httpx"
)

// tenantAuth accepts "tenant-token" for namespace "team-a" only, and the
// static admin token.
type tenantAuth struct{ admin *auth.StaticToken }

func (a tenantAuth) Authenticate(ctx context.Context, token string) (auth.Principal, error) {
	if token == "tenant-token" {
		return auth.Principal{Namespace: "team-a"}, nil
	}
	return a.admin.Authenticate(ctx, token)
}

type testRoutes struct{}

func (testRoutes) Register(v1 *gin.RouterGroup, root *gin.Engine) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	v1.GET("/namespaces/:ns/things", func(c *gin.Context) { c.JSON(200, gin.H{"ns": c.Param("ns")}) })
	v1.POST("/echo", httpx.Handle(log, func(c *gin.Context) error {
		var v struct {
			Name string `json:"name"`
		}
		if err := httpx.DecodeJSON(c, &v); err != nil {
			return err
		}
		c.JSON(200, v)
		return nil
	}))
	root.GET("/panic", func(*gin.Context) { panic("boom") })
}

func newServer(t *testing.T) http.Handler {
	s := server.New(server.Params{
		Config:   server.Config{Listen: "127.0.0.1:0"},
		Auth:     tenantAuth{auth.NewStaticToken("admin-token-0123456789")},
		Routes:   []httpx.Routes{testRoutes{}},
		Registry: prometheus.NewRegistry(),
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		LC:       fxtest.NewLifecycle(t),
	})
	return s.Handler()
}

func TestAuthAndNamespaces(t *testing.T) {
	h := newServer(t)
	tests := []struct {
		name, token, method, path, body string
		code                            int
		want                            string
	}{
		{"no token", "", "GET", "/v1/whoami", "", 401, "missing API token"},
		{"wrong token", "nope", "GET", "/v1/whoami", "", 401, "invalid API token"},
		{"admin whoami", "admin-token-0123456789", "GET", "/v1/whoami", "", 200, `"namespace":"default"`},
		{"tenant whoami", "tenant-token", "GET", "/v1/whoami", "", 200, `"namespace":"team-a"`},
		{"tenant in own namespace", "tenant-token", "GET", "/v1/namespaces/team-a/things", "", 200, `"ns":"team-a"`},
		{"tenant in another namespace", "tenant-token", "GET", "/v1/namespaces/team-b/things", "", 403, `may not act in namespace "team-b"; it may act only in namespace "team-a"`},
		{"lower-case scheme", "bearer tenant-token", "GET", "/v1/whoami", "", 200, `"namespace":"team-a"`},
		{"upper-case scheme", "BEARER tenant-token", "GET", "/v1/whoami", "", 200, `"namespace":"team-a"`},
		{"other scheme", "Basic dGVuYW50LXRva2Vu", "GET", "/v1/whoami", "", 401, "missing API token"},
		{"scheme without token", "Bearer ", "GET", "/v1/whoami", "", 401, "missing API token"},
		{"admin whoami says admin", "admin-token-0123456789", "GET", "/v1/whoami", "", 200, `"admin":true`},
		{"admin anywhere", "admin-token-0123456789", "GET", "/v1/namespaces/team-b/things", "", 200, `"ns":"team-b"`},
		{"invalid namespace", "admin-token-0123456789", "GET", "/v1/namespaces/Team_B/things", "", 400, "invalid namespace"},
		{"health is public", "", "GET", "/healthz", "", 200, "ok"},
		{"unknown route", "", "GET", "/nope", "", 404, "no route for GET /nope"},
		{"wrong method", "", "DELETE", "/healthz", "", 405, "not allowed"},
		{"panic", "", "GET", "/panic", "", 500, "internal server error"},
		{"malformed JSON", "admin-token-0123456789", "POST", "/v1/echo", "{\n\"name\": }", 400, "line 2"},
		{"unknown field", "admin-token-0123456789", "POST", "/v1/echo", `{"nmae": "x"}`, 400, `unknown field "nmae"`},
		{"wrong type", "admin-token-0123456789", "POST", "/v1/echo", `{"name": 5}`, 400, `field "name" must be a string, not a number`},
		{"empty body", "admin-token-0123456789", "POST", "/v1/echo", ``, 400, "empty"},
		{"trailing data", "admin-token-0123456789", "POST", "/v1/echo", `{"name": "x"} {}`, 400, "unexpected data"},
		{"good JSON", "admin-token-0123456789", "POST", "/v1/echo", `{"name": "x"}`, 200, `"name":"x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			switch {
			case strings.Contains(tt.token, " "):
				req.Header.Set("Authorization", tt.token)
			case tt.token != "":
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			body := rec.Body.String()
			var e httpx.ErrorBody
			if json.Unmarshal(rec.Body.Bytes(), &e) == nil && e.Error != "" {
				body = e.Error
			}
			if rec.Code != tt.code || !strings.Contains(body, tt.want) {
				t.Errorf("got %d %s; want %d containing %q", rec.Code, body, tt.code, tt.want)
			}
		})
	}
}

// fastRoutes serves /fast/... on the server's front and, as its gin route
// must, the same answer on gin.
type fastRoutes struct{}

func (fastRoutes) Register(_ *gin.RouterGroup, root *gin.Engine) {
	root.GET("/fast/:x", func(c *gin.Context) { c.String(200, "gin") })
}

func (fastRoutes) FastRoute(path string) string {
	if strings.HasPrefix(path, "/fast/") {
		return "/fast/:x"
	}
	return ""
}

func (fastRoutes) ServeFast(w http.ResponseWriter, _ *http.Request) bool {
	io.WriteString(w, "front")
	return false
}

// TestFrontOnTheListener: the server's one listener serves a fast route on
// the front and the API on gin, on the same connection, and the metrics
// count both.
func TestFrontOnTheListener(t *testing.T) {
	lc := fxtest.NewLifecycle(t)
	s := server.New(server.Params{
		Config:   server.Config{Listen: "127.0.0.1:0"},
		Auth:     tenantAuth{auth.NewStaticToken("admin-token-0123456789")},
		Routes:   []httpx.Routes{testRoutes{}, fastRoutes{}},
		Registry: prometheus.NewRegistry(),
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		LC:       lc,
	})
	lc.RequireStart()
	defer lc.RequireStop()
	base := "http://" + s.Addr().String()
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	for _, tc := range []struct{ path, want string }{
		{"/fast/a", "front"},
		{"/healthz", `{"status":"ok"}`},
		{"/fast/a", "gin"}, // the connection is net/http's now
	} {
		resp, err := client.Get(base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != tc.want {
			t.Errorf("GET %s: got %q, want %q", tc.path, body, tc.want)
		}
	}
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `sless_http_request_duration_seconds_count{code="200",method="GET",route="/fast/:x"} 2`
	if !strings.Contains(string(body), want) {
		t.Errorf("metrics lack %s", want)
	}
}

// TestNamespaceMetrics: /v1/namespaces/{ns}/metrics serves the series of
// that namespace only, to a token of it.
func TestNamespaceMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sless_invocations_total", Help: "h"}, []string{"namespace", "function"})
	up := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sless_other_gauge", Help: "h"})
	reg.MustRegister(calls, up)
	calls.WithLabelValues("team-a", "hello").Add(3)
	calls.WithLabelValues("team-b", "secret").Add(5)
	s := server.New(server.Params{
		Config: server.Config{Listen: "127.0.0.1:0"}, Auth: tenantAuth{auth.NewStaticToken("admin-token-0123456789")},
		Registry: reg, Log: slog.New(slog.DiscardHandler), LC: fxtest.NewLifecycle(t),
	})
	get := func(token, ns string) (int, string) {
		req := httptest.NewRequest("GET", "/v1/namespaces/"+ns+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	code, body := get("tenant-token", "team-a")
	if code != 200 || !strings.Contains(body, `sless_invocations_total{function="hello",namespace="team-a"} 3`) ||
		strings.Contains(body, "team-b") || strings.Contains(body, "sless_other_gauge") {
		t.Errorf("team-a's metrics: %d\n%s\nwant team-a's series only", code, body)
	}
	if code, _ := get("tenant-token", "team-b"); code != 403 {
		t.Errorf("team-b's metrics with team-a's token: %d, want 403", code)
	}
}

// procsRoutes answers with the GOMAXPROCS its handler ran with.
type procsRoutes struct{}

func (procsRoutes) Register(v1 *gin.RouterGroup, _ *gin.Engine) {
	procs := func(c *gin.Context) { c.String(200, "%d", runtime.GOMAXPROCS(0)) }
	v1.GET("/procs", procs)
	v1.POST("/procs", procs)
}

// An API write runs with the governor's busy procs; a read leaves them as
// they are.
func TestAPIWritesRaiseTheProcs(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	h := server.New(server.Params{
		Config:   server.Config{Listen: "127.0.0.1:0"},
		Auth:     auth.NewStaticToken("admin-token-0123456789"),
		Routes:   []httpx.Routes{procsRoutes{}},
		Registry: prometheus.NewRegistry(),
		Log:      slog.New(slog.DiscardHandler),
		LC:       fxtest.NewLifecycle(t),
		Procs:    procs.New(1, 3, time.Hour),
	}).Handler()
	for _, tt := range []struct{ method, want string }{{"GET", "1"}, {"POST", "3"}} {
		req := httptest.NewRequest(tt.method, "/v1/procs", nil)
		req.Header.Set("Authorization", "Bearer admin-token-0123456789")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 || w.Body.String() != tt.want {
			t.Errorf("%s: %d %s; want GOMAXPROCS %s in the handler", tt.method, w.Code, w.Body, tt.want)
		}
	}
}
