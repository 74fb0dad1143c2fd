// Package server is the HTTP server of the API and of /fn: the gin engine,
// authentication, health, readiness and metrics endpoints, and the listener
// lifecycle. Modules add their handlers as httpx.Routes.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/fx"

	"sless.kube5s.ru/sless/docs"
	"sless.kube5s.ru/sless/internal/discovery"
	"sless.kube5s.ru/sless/internal/procs"
	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/auth"
	"sless.kube5s.ru/sless/modules/server/front"
	"sless.kube5s.ru/sless/modules/server/httpx"
)

// ReadyChecksGroup is the fx value-group tag of ReadyCheck.
const ReadyChecksGroup = `group:"server.readychecks"`

// ReadyCheck is one dependency that /readyz checks, such as the database.
type ReadyCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

// Config configures the server.
type Config struct {
	// Listen is the TCP address to listen on.
	Listen string
	// DataDir, when set, receives the discovery file once the server
	// listens, so that the CLI on the same machine finds it; it is removed
	// on stop.
	DataDir string
}

// Params are the server's dependencies.
type Params struct {
	fx.In
	Config   Config
	Auth     auth.Authenticator
	Routes   []httpx.Routes `group:"httpx.routes"`
	Checks   []ReadyCheck   `group:"server.readychecks"`
	Registry *prometheus.Registry
	Log      *slog.Logger
	LC       fx.Lifecycle
	// Procs, when supplied, is raised while an API request that changes
	// something (any method but GET and HEAD) is in flight.
	Procs *procs.Governor `optional:"true"`
}

// Whoami is the body of GET /v1/whoami: what the caller's token may do.
type Whoami struct {
	// Namespace is the token's own namespace.
	Namespace string `json:"namespace"`
	// Admin is set for a token that acts in every namespace and manages
	// tokens.
	Admin bool `json:"admin,omitempty"`
	// Function is set for an invoker token: it only invokes that function
	// on /fn.
	Function string `json:"function,omitempty"`
}

// Server is the running HTTP server.
type Server struct {
	cfg    Config
	engine *gin.Engine
	http   *http.Server
	front  *front.Front
	log    *slog.Logger
	addr   net.Addr
}

// New builds the server and registers its start and stop hooks: start listens
// (so that a bad address fails start-up) and serves in the background; stop
// drains in-flight requests until the stop context ends.
func New(p Params) *Server {
	gin.SetMode(gin.ReleaseMode)
	s := &Server{cfg: p.Config, engine: gin.New(), log: p.Log}
	s.engine.ContextWithFallback = true
	m := newMetrics(p.Registry)
	s.engine.Use(recovery(p.Log), m.middleware)
	s.engine.NoRoute(func(c *gin.Context) {
		c.JSON(http.StatusNotFound, httpx.ErrorBody{Error: fmt.Sprintf("no route for %s %s", c.Request.Method, c.Request.URL.Path)})
	})
	s.engine.HandleMethodNotAllowed = true
	s.engine.NoMethod(func(c *gin.Context) {
		c.JSON(http.StatusMethodNotAllowed, httpx.ErrorBody{Error: fmt.Sprintf("method %s is not allowed on %s", c.Request.Method, c.Request.URL.Path)})
	})
	s.engine.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	s.engine.GET("/readyz", readyz(p.Checks))
	s.engine.GET("/metrics", gin.WrapH(promhttp.HandlerFor(p.Registry, promhttp.HandlerOpts{})))
	// The document of the API is public: it is the API's shape, the same
	// for every server, and tools and the console read it before they
	// have a token.
	s.engine.GET("/v1/openapi.json", func(c *gin.Context) { c.Data(http.StatusOK, "application/json", docs.OpenAPI) })

	v1 := s.engine.Group("/v1", authenticate(p.Auth, p.Log), authorizeNamespace)
	if p.Procs != nil {
		v1.Use(raiseProcs(p.Procs))
	}
	v1.GET("/whoami", func(c *gin.Context) {
		p := principal(c)
		c.JSON(http.StatusOK, Whoami{Namespace: p.Namespace, Admin: p.AllNamespaces, Function: p.Function})
	})
	v1.GET("/namespaces/:ns/metrics", namespaceMetrics(p.Registry))
	var fast []httpx.FastRoute
	for _, r := range p.Routes {
		r.Register(v1, s.engine)
		if f, ok := r.(httpx.FastRoute); ok {
			fast = append(fast, f)
		}
	}
	s.http = &http.Server{
		Handler:           s.engine,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(p.Log.Handler(), slog.LevelDebug),
	}
	s.front = front.New(front.Config{Routes: fast, Fallback: s.http, Observe: m.observe, Log: p.Log})
	p.LC.Append(fx.Hook{OnStart: s.start, OnStop: s.stop})
	return s
}

// Handler returns the server's handler, for tests.
func (s *Server) Handler() http.Handler { return s.engine }

// Addr returns the address the server listens on, once started.
func (s *Server) Addr() net.Addr { return s.addr }

func (s *Server) start(context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.cfg.Listen, err)
	}
	s.addr = ln.Addr()
	go func() {
		if err := s.front.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server stopped", "error", err)
		}
	}()
	endpoint := "http://" + ln.Addr().String()
	s.log.Info("listening", "endpoint", endpoint)
	if s.cfg.DataDir != "" {
		if err := discovery.Write(s.cfg.DataDir, discovery.Info{Endpoint: endpoint, PID: os.Getpid()}); err != nil {
			s.log.Warn("cannot write the discovery file; the CLI will need SLESS_ENDPOINT", "error", err)
		}
	}
	return nil
}

func (s *Server) stop(ctx context.Context) error {
	if s.cfg.DataDir != "" {
		discovery.Remove(s.cfg.DataDir)
	}
	if err := s.front.Shutdown(ctx); err != nil {
		return fmt.Errorf("draining http requests: %w", err)
	}
	return nil
}

func principal(c *gin.Context) auth.Principal {
	p, _ := auth.FromContext(c.Request.Context())
	return p
}

func authenticate(a auth.Authenticator, log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		token, ok := auth.BearerToken(c.GetHeader("Authorization"))
		if !ok {
			c.Header("WWW-Authenticate", `Bearer realm="sless"`)
			c.AbortWithStatusJSON(http.StatusUnauthorized, httpx.ErrorBody{Error: "missing API token: send Authorization: Bearer <token>"})
			return
		}
		p, err := a.Authenticate(c, token)
		if err != nil {
			httpx.WriteAuthError(c, log, err)
			return
		}
		c.Request = c.Request.WithContext(auth.NewContext(c.Request.Context(), p))
	}
}

// authorizeNamespace checks the {ns} of /v1/namespaces/{ns}/... routes: a
// valid name the token may act in.
func authorizeNamespace(c *gin.Context) {
	ns := c.Param("ns")
	if ns == "" {
		return
	}
	if msg := validation.CheckName(ns); msg != "" {
		c.AbortWithStatusJSON(http.StatusBadRequest, httpx.ErrorBody{Error: "invalid namespace: " + msg})
		return
	}
	if p := principal(c); !p.CanAccess(ns) {
		c.AbortWithStatusJSON(http.StatusForbidden, httpx.ErrorBody{Error: p.Refusal(ns)})
	}
}

// namespaceMetrics serves the series of one namespace (those labelled
// namespace="{ns}") in the format /metrics has, for a tenant's token, which
// may not read /metrics' series of other namespaces on the API.
func namespaceMetrics(reg prometheus.Gatherer) gin.HandlerFunc {
	return func(c *gin.Context) {
		ns := c.Param("ns")
		only := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
			families, err := reg.Gather()
			return filterNamespace(families, ns), err
		})
		promhttp.HandlerFor(only, promhttp.HandlerOpts{}).ServeHTTP(c.Writer, c.Request)
	}
}

// filterNamespace keeps the series labelled namespace=ns, and the families
// that have some.
func filterNamespace(families []*dto.MetricFamily, ns string) []*dto.MetricFamily {
	out := families[:0]
	for _, f := range families {
		kept := f.Metric[:0]
		for _, m := range f.Metric {
			for _, l := range m.GetLabel() {
				if l.GetName() == "namespace" && l.GetValue() == ns {
					kept = append(kept, m)
					break
				}
			}
		}
		if len(kept) > 0 {
			f.Metric = kept
			out = append(out, f)
		}
	}
	return out
}

func readyz(checks []ReadyCheck) gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx, cancel := context.WithTimeout(c, 2*time.Second)
		defer cancel()
		failed := map[string]string{}
		for _, ch := range checks {
			if err := ch.Check(ctx); err != nil {
				failed[ch.Name] = err.Error()
			}
		}
		if len(failed) > 0 {
			c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unavailable", "failed": failed})
			return
		}
		c.JSON(http.StatusOK, gin.H{"status": "ok"})
	}
}

func recovery(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				log.Error("panic serving request", "method", c.Request.Method, "path", c.Request.URL.Path, "panic", v)
				c.AbortWithStatusJSON(http.StatusInternalServerError, httpx.ErrorBody{Error: "internal server error; the server log has the details"})
			}
		}()
		c.Next()
	}
}

type metrics struct {
	duration *prometheus.HistogramVec
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sless_http_request_duration_seconds",
		Help:    "Duration of HTTP requests by route, method and status code.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"route", "method", "code"})}
	reg.MustRegister(m.duration)
	return m
}

func (m *metrics) middleware(c *gin.Context) {
	start := time.Now()
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	m.observe(route, c.Request.Method, c.Writer.Status(), time.Since(start))
}

func (m *metrics) observe(route, method string, code int, d time.Duration) {
	m.duration.WithLabelValues(route, method, strconv.Itoa(code)).Observe(d.Seconds())
}

// raiseProcs raises g while a request that changes something is in flight:
// the writes, uploads and builds of a deploy.
func raiseProcs(g *procs.Governor) gin.HandlerFunc {
	return func(c *gin.Context) {
		if m := c.Request.Method; m == http.MethodGet || m == http.MethodHead {
			return
		}
		defer g.Begin()()
		c.Next()
	}
}
