// Package proxy is the data plane's front: ANY /fn/{ns}/{name}[/{path}]
// proxies a client's request to an instance of the function when an enabled
// http trigger exposes it, and the same path serves the Invoker that
// triggers, jobs and the CLI (POST .../functions/{name}/invoke) use. Every
// invocation is recorded in the ledger.
package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"sless.kube5s.ru/sless/internal/procs"
	"sless.kube5s.ru/sless/modules/auth"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/server/httpx"
	"sless.kube5s.ru/sless/modules/tracing"
)

// Config configures the proxy.
type Config struct {
	// MaxRequestBytes caps request bodies; default 6 MiB.
	MaxRequestBytes int64
	// MaxResultBytes caps response bodies, on /fn and for Invoke alike;
	// default 6 MiB. A longer declared body is answered with 502, a longer
	// streamed one is cut and the client's connection aborted.
	MaxResultBytes int64
}

// Proxy serves /fn and implements invoke.Invoker.
type Proxy struct {
	cfg       Config
	instances runtime.Instances
	store     functions.Store
	ledger    invoke.Ledger
	exposure  invoke.Exposure
	authn     auth.Authenticator
	log       *slog.Logger
	refusals  *refusals
	metrics   *metrics
	// tracer, when set, exports the spans of sampled invocations.
	tracer tracing.Exporter
	// crowd, when set, counts the invocations in flight.
	crowd *procs.Crowd
}

var _ invoke.Invoker = (*Proxy)(nil)

// New returns the proxy. /fn serves the functions exposure allows, private
// ones to the callers authn accepts; the store tells an unknown function
// (404) from one that is not ready (503) when instances has none of it.
func New(cfg Config, instances runtime.Instances, store functions.Store, ledger invoke.Ledger, exposure invoke.Exposure,
	authn auth.Authenticator, log *slog.Logger) *Proxy {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = 6 << 20
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = 6 << 20
	}
	p := &Proxy{cfg: cfg, instances: instances, store: store, ledger: ledger, exposure: exposure, authn: authn, log: log,
		refusals: newRefusals(ledger, time.Second), metrics: newMetrics()}
	if n, ok := instances.(runtime.UndeployNotifier); ok {
		// A deleted function's series go with it.
		n.OnUndeploy(p.metrics.forget)
	}
	return p
}

// Trace makes the proxy export the spans of the invocations that e samples
// (or whose traceparent says sampled). Call it before serving.
func (p *Proxy) Trace(e tracing.Exporter) { p.tracer = e }

// The invocations in flight at which the proxy raises the server's CPUs,
// and below which it lets them go (package procs): at 32 connections on one
// hello function every CPU served more, at 8 and fewer one thread did as
// well for less CPU.
const (
	crowdRaiseAt = 16
	crowdLowerAt = 8
)

// RaiseProcs makes g give the server every CPU while many invocations are
// in flight (see crowdRaiseAt). Call it before the proxy serves.
func (p *Proxy) RaiseProcs(g *procs.Governor) { p.crowd = g.Crowd(crowdRaiseAt, crowdLowerAt) }

// Metrics returns the collector of the invocations' series (by function:
// counts by trigger kind and outcome, cold starts, durations).
func (p *Proxy) Metrics() prometheus.Collector { return p.metrics }

// Stop records what the proxy counted and has not recorded yet: the
// summaries of refusals at capacity. It runs after the HTTP server stopped
// taking requests and before the ledger stops.
func (p *Proxy) Stop(context.Context) error {
	p.refusals.flush()
	return nil
}

// Register implements httpx.Routes.
func (p *Proxy) Register(v1 *gin.RouterGroup, root *gin.Engine) {
	root.Any(fnRoute, p.serveFnGin)
	root.Any(fnPathRoute, p.serveFnGin)
	v1.POST("/namespaces/:ns/functions/:name/invoke", p.serveCLI)
	v1.GET("/namespaces/:ns/stats", p.serveStats)
}

// The gin routes of /fn.
const (
	fnRoute     = "/fn/:ns/:name"
	fnPathRoute = "/fn/:ns/:name/*path"
)

var _ httpx.FastRoute = (*Proxy)(nil)

// FastRoute implements httpx.FastRoute: the server's front serves /fn
// itself when the namespace and name are as gin would take them from the
// path, without escapes.
func (p *Proxy) FastRoute(path string) string {
	_, _, below, ok := splitFnPath(path)
	switch {
	case !ok:
		return ""
	case below:
		return fnPathRoute
	}
	return fnRoute
}

// ServeFast implements httpx.FastRoute.
func (p *Proxy) ServeFast(w http.ResponseWriter, r *http.Request) (abort bool) {
	ns, name, _, _ := splitFnPath(r.URL.Path)
	return p.serveFn(w, r, ns, name)
}

// splitFnPath splits /fn/{ns}/{name}[/{path}]; ok is false for another
// path, an empty or escaped namespace or name. below reports a path under
// the function.
func splitFnPath(path string) (ns, name string, below, ok bool) {
	rest, ok := strings.CutPrefix(path, "/fn/")
	if !ok {
		return "", "", false, false
	}
	ns, rest, ok = strings.Cut(rest, "/")
	if !ok {
		return "", "", false, false
	}
	name, _, below = strings.Cut(rest, "/")
	if ns == "" || name == "" || strings.ContainsRune(ns, '%') || strings.ContainsRune(name, '%') {
		return "", "", false, false
	}
	return ns, name, below, true
}

// invocationIDHeader names the invocation an answer is recorded as; the
// platform's answers keep it when they drop the instance's headers.
const invocationIDHeader = "X-Sless-Invocation-Id"

// The X-Sless-Trigger headers of /fn and of CLI invocations.
var (
	httpTrigger = []byte(`{"kind":"http"}`)
	cliTrigger  = []byte(`{"kind":"cli"}`)
)

func (p *Proxy) serveFnGin(c *gin.Context) {
	if p.serveFn(c.Writer, c.Request, c.Param("ns"), c.Param("name")) {
		panic(http.ErrAbortHandler)
	}
}

// serveFn answers /fn for function ns/name; abort reports a response that
// failed after its head went out, which must end by closing the connection
// (net/http then sends no terminating chunk), so that the client sees an
// error instead of a short body that looks complete.
func (p *Proxy) serveFn(w http.ResponseWriter, r *http.Request, ns, name string) (abort bool) {
	if r.Method == http.MethodConnect {
		// A tunnel is not a function call, and the wrappers' HTTP servers do
		// not answer it as one.
		writeError(w, http.StatusMethodNotAllowed, "method CONNECT is not supported on /fn")
		return false
	}
	// The path below the function, as the client escaped it.
	path := strings.TrimPrefix(r.URL.EscapedPath(), "/fn/"+ns+"/"+name)
	if path == "" {
		path = "/"
	}
	if strings.HasPrefix(path, "/_sless/") || path == "/_sless" {
		writeError(w, http.StatusNotFound, "paths under /_sless/ are reserved by the platform")
		return false
	}
	access := p.exposure.Access(ns, name)
	if !access.Exposed {
		p.notExposed(w, r, ns, name)
		return false
	}
	if access.TokenRequired && !p.authorize(w, r, ns, name) {
		return false
	}
	forward(r)
	c := &call{ns: ns, name: name, path: path, r: r, w: w, kind: invoke.KindHTTP, trigger: httpTrigger}
	p.serve(r.Context(), c)
	return c.cut
}

func (p *Proxy) serveCLI(c *gin.Context) {
	// The API token authorized the call; the function must not see it.
	c.Request.Header.Del("Authorization")
	forward(c.Request)
	p.serveHTTP(c.Request.Context(), &call{ns: c.Param("ns"), name: c.Param("name"), path: "/", r: c.Request, w: c.Writer,
		kind: invoke.KindCLI, trigger: cliTrigger})
}

// serveHTTP runs an invocation for an HTTP client. A response that failed
// after its head went out aborts the connection (net/http then sends no
// terminating chunk), so that the client sees an error instead of a short
// body that looks complete.
func (p *Proxy) serveHTTP(ctx context.Context, c *call) {
	p.serve(ctx, c)
	if c.cut {
		panic(http.ErrAbortHandler)
	}
}

// forward adds to r the X-Forwarded headers that tell a function who
// called and how: the client's address appended to X-Forwarded-For, as
// net/http/httputil's ReverseProxy does (the last entry is the address this
// server saw; earlier ones are what the client or the proxies in front of
// the server claim; a client on a unix socket adds none), and
// X-Forwarded-Host, the Host the client asked for (the instance's request
// has a Host of its own), unless a proxy in front set it.
func forward(r *http.Request) {
	h := r.Header
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := h["X-Forwarded-For"]; len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		h["X-Forwarded-For"] = []string{ip}
	}
	if _, ok := h["X-Forwarded-Host"]; !ok && r.Host != "" {
		h["X-Forwarded-Host"] = []string{r.Host}
	}
}

// authorize checks the caller of a private function before anything can
// wake it, and answers the refusal: 401 without a valid token, 403 for a
// token that may not invoke the function, 503 when the token cannot be
// checked. An accepted token is removed from the request: it is the
// platform's, not the function's.
func (p *Proxy) authorize(w http.ResponseWriter, r *http.Request, ns, name string) bool {
	token, ok := auth.BearerToken(r.Header.Get("Authorization"))
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sless"`)
		writeError(w, http.StatusUnauthorized, fmt.Sprintf(
			"function %q is private: send Authorization: Bearer <token> with a token of namespace %q", name, ns))
		return false
	}
	who, err := p.authn.Authenticate(r.Context(), token)
	if err != nil {
		httpx.WriteAuthErrorHTTP(w, r, p.log, err)
		return false
	}
	if !who.CanInvoke(ns, name) {
		writeError(w, http.StatusForbidden, fmt.Sprintf("this token may not invoke function %q of namespace %q", name, ns))
		return false
	}
	r.Header.Del("Authorization")
	return true
}

// notExposed answers /fn for a function without an enabled http trigger.
func (p *Proxy) notExposed(w http.ResponseWriter, r *http.Request, ns, name string) {
	if _, err := p.store.Get(r.Context(), functions.Key{Namespace: ns, Name: name}); errors.Is(err, functions.ErrNotFound) {
		p.metrics.notFound.Add(1)
		writeNotFound(w, ns, name)
		return
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("function %q is not exposed on /fn: it has no enabled http trigger", name))
}

// call is one invocation in flight.
type call struct {
	ns, name, path string
	r              *http.Request
	w              http.ResponseWriter
	kind, trigName string
	trigger        []byte
	// id is the invocation id to use; empty: a new one.
	id string
	// cancellable: cancelling the context ends the invocation (Invoke);
	// otherwise only the deadline does (/fn).
	cancellable bool
	// begin: the run's start is kept in the ledger (Invoke), so that a
	// crash during it is recorded; /fn's hot path does not pay the write.
	begin bool
	// cut: the response failed after its head was written.
	cut bool
	// refusal is the platform's answer in place of the function's, for
	// the metrics; outcomeNone when the function answered.
	refusal outcome
	// leased: an instance took the invocation's capacity.
	leased bool
	// traceparent is what the handler gets: the invocation's trace and the
	// id of its handler span.
	traceparent string
	// held is w once the invocation is admitted: the end of its answer
	// goes out after its record.
	held lastByteHeld
}

// Invoke implements invoke.Invoker through the same path as /fn.
func (p *Proxy) Invoke(ctx context.Context, req invoke.Request) (*invoke.Response, error) {
	method, path := req.Method, req.Path
	if method == "" {
		method = http.MethodPost
	}
	if path == "" {
		path = "/"
	}
	r, err := http.NewRequestWithContext(ctx, method, "http://fn"+path, bytes.NewReader(req.Body))
	if err != nil {
		return nil, fmt.Errorf("invoking %s/%s: %w", req.Namespace, req.Function, err)
	}
	for k, vv := range req.Header {
		r.Header[k] = vv
	}
	trigger := map[string]any{}
	for k, v := range req.TriggerMeta {
		trigger[k] = v
	}
	trigger["kind"] = req.TriggerKind
	if req.TriggerName != "" {
		trigger["name"] = req.TriggerName
	}
	trigJSON, err := json.Marshal(trigger)
	if err != nil {
		return nil, fmt.Errorf("encoding the trigger metadata: %w", err)
	}
	out := &runtime.ResponseBuffer{}
	c := &call{ns: req.Namespace, name: req.Function, path: r.URL.EscapedPath(), r: r, w: out,
		kind: req.TriggerKind, trigName: req.TriggerName, trigger: trigJSON, id: req.InvocationID, cancellable: true, begin: true}
	rec := p.serve(ctx, c)
	if c.cut {
		// What a client would see as an aborted connection.
		out = &runtime.ResponseBuffer{}
		writeError(out, http.StatusBadGateway, rec.Error)
	}
	return &invoke.Response{InvocationID: rec.ID, StatusCode: out.StatusCode, Header: out.Header(),
		Body: out.Body.Bytes(), Error: rec.Error}, nil
}

// serve runs one invocation, answers the caller and records it.
func (p *Proxy) serve(ctx context.Context, c *call) *invoke.Record {
	start := time.Now()
	if p.crowd != nil {
		p.crowd.Begin()
		defer p.crowd.End()
	}
	id := c.id
	var u uuid.UUID
	if id == "" {
		u = uuid.Must(uuid.NewV7()) // fails only when crypto/rand does
		id = u.String()
	} else if u, _ = uuid.Parse(id); u == uuid.Nil {
		u = uuid.New()
	}
	span := p.startSpan(c, u)
	c.traceparent = span.handlerTraceparent()
	rec := &invoke.Record{ID: id, Namespace: c.ns, Function: c.name, TriggerKind: c.kind, TriggerName: c.trigName,
		Method: c.r.Method, Path: c.path, StartedAt: start.UTC(), TraceID: c.traceparent[3:35]}
	end, err := p.admit(c, rec)
	if err != nil {
		// Nothing runs that could not be recorded; nothing is recorded.
		c.w.Header().Set("Retry-After", "1")
		writeError(c.w, http.StatusServiceUnavailable, err.Error()+"; retry later")
		return &invoke.Record{StatusCode: http.StatusServiceUnavailable, Error: err.Error()}
	}
	if end != nil {
		// After Record: a start is kept until its run's record is.
		defer end()
	}
	c.held.ResponseWriter = c.w
	c.w = &c.held
	c.w.Header().Set(invocationIDHeader, rec.ID)
	series := p.metrics.lookup(functions.Key{Namespace: c.ns, Name: c.name})
	p.run(ctx, c, rec, start)
	took := time.Since(start)
	rec.DurationMS = ms(took)
	if rec.StatusCode != 0 {
		p.ledger.Record(rec)
	}
	c.held.release()
	p.metrics.observe(series, c, rec, took)
	if p.tracer != nil && span.Sampled() && rec.StatusCode != 0 {
		p.exportSpans(&span, c, rec, start, took)
	}
	if rec.StatusCode != 0 && p.log.Enabled(ctx, slog.LevelDebug) {
		// Only at debug level: a line per invocation costs more than
		// the rest of the platform's work for it.
		p.log.DebugContext(ctx, "invocation ended", "namespace", c.ns, "function", c.name, "invocation_id", rec.ID,
			"trace_id", rec.TraceID, "trigger_kind", c.kind, "status_code", rec.StatusCode, "cold_start", rec.ColdStart,
			"duration_ms", rec.DurationMS, "error", rec.Error)
	}
	return rec
}

// admit checks that the invocation can be recorded and, for a trigger's or
// job's run (c.begin), begins it in the ledger, so that a crash during the
// run is recorded; end, nil for /fn, ends it.
func (p *Proxy) admit(c *call, rec *invoke.Record) (end func(), err error) {
	if err := p.ledger.Accepting(); err != nil {
		return nil, err
	}
	if !c.begin {
		return nil, nil
	}
	return p.ledger.Begin(rec)
}

// maxReplayBytes is the largest request body kept in memory so that an
// invocation an instance did not take can go to another instance.
const maxReplayBytes = 64 << 10

// replayableBody reads a small request body of known length and returns a
// function that gives it again from the start; nil for a larger, unknown or
// empty body. A failed read is given again as the same failure, after the
// bytes read before it.
func replayableBody(r *http.Request) func() io.ReadCloser {
	if r.Body == nil || r.ContentLength <= 0 || r.ContentLength > maxReplayBytes {
		return nil
	}
	buf := make([]byte, r.ContentLength)
	n, err := io.ReadFull(r.Body, buf)
	buf = buf[:n]
	return func() io.ReadCloser {
		if err != nil {
			return io.NopCloser(io.MultiReader(bytes.NewReader(buf), errReader{err}))
		}
		return io.NopCloser(bytes.NewReader(buf))
	}
}

// errReader fails every read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// maxSendAttempts bounds the instances one invocation is offered to when
// they are found gone before it was sent.
const maxSendAttempts = 3

// run fills rec; a StatusCode of 0 means there is nothing to record: an
// unknown function, or a refusal at capacity that a summary record counts.
func (p *Proxy) run(ctx context.Context, c *call, rec *invoke.Record, start time.Time) {
	if c.r.ContentLength > p.cfg.MaxRequestBytes {
		p.fail(c, rec, http.StatusRequestEntityTooLarge, p.tooLarge())
		return
	}
	if c.r.Body != nil && c.r.ContentLength < 0 {
		// A declared length was checked above, and no more is read; a
		// chunked body is cut at the limit.
		c.r.Body = http.MaxBytesReader(nil, c.r.Body, p.cfg.MaxRequestBytes)
	}
	// An HTTP client going away does not end the exchange, which the
	// deadline bounds: a handler that started runs to its end and its
	// capacity is released only then. Triggers cancel their runs on purpose
	// (a cron Replace), which recycles the instance.
	doCtx := ctx
	if !c.cancellable {
		doCtx = context.WithoutCancel(ctx)
	}
	var (
		lease runtime.Lease
		t     *runtime.Target
		res   runtime.Result
		err   error
	)
	// An instance found gone before the invocation was sent (its process
	// died since it last served) is replaced, and the invocation goes to
	// another one: after every instance died, the first call is a cold
	// start, not a 502.
	replay := replayableBody(c.r)
	for attempt := 1; ; attempt++ {
		if replay != nil {
			c.r.Body = replay()
		}
		lease, err = p.instances.Acquire(ctx, functions.Key{Namespace: c.ns, Name: c.name})
		if err != nil {
			p.acquireFailed(ctx, c, rec, err)
			return
		}
		c.leased = true
		t = lease.Target()
		// The cold start so far: queued is the time before it began.
		rec.QueueMS = ms(max(time.Since(start)-lease.ColdStart(), 0))
		inv := &runtime.Invocation{ID: rec.ID, Request: c.r, Path: c.path, Deadline: time.Now().Add(t.Timeout), Trigger: c.trigger,
			Traceparent: c.traceparent, MaxResponseBytes: p.cfg.MaxResultBytes,
			BeforeWrite: func(res *runtime.Result) {
				recordColdStart(rec, lease)
				c.w.Header().Set("Server-Timing", serverTiming(rec, res.Handler))
			}}
		res, err = lease.Do(doCtx, inv, c.w)
		recordColdStart(rec, lease)
		if !errors.Is(err, runtime.ErrNotSent) || attempt == maxSendAttempts || (res.RequestBytes > 0 && replay == nil) {
			break
		}
		lease.Release()
	}
	defer lease.Release()
	rec.RequestBytes, rec.ResponseBytes = res.RequestBytes, res.ResponseBytes
	rec.HandlerMS, rec.Logs, rec.Error = ms(res.Handler), res.Logs, res.Error
	if err != nil {
		p.doFailed(ctx, c, rec, t, err)
		return
	}
	rec.StatusCode = res.StatusCode
	if res.Err != nil {
		c.cut = true
		if errors.Is(res.Err, runtime.ErrCrashed) || errors.Is(res.Err, runtime.ErrResponseTooLarge) {
			// The function failed to answer, whatever status its head had:
			// recorded as the 502 an Invoke caller gets.
			rec.StatusCode, c.refusal = http.StatusBadGateway, outcomeCrash
		}
		if rec.Error == "" {
			rec.Error = "the response was cut short: " + runtime.PublicMessage(res.Err, res.Err.Error())
		}
	}
}

// recordColdStart puts the cold start of the invocation that lease served
// in rec.
func recordColdStart(rec *invoke.Record, lease runtime.Lease) {
	cold := lease.ColdStart()
	rec.ColdStart, rec.ColdStartMS = cold > 0, ms(cold)
}

func (p *Proxy) tooLarge() string {
	return fmt.Sprintf("the request body exceeds the limit of %s", humanize.IBytes(uint64(p.cfg.MaxRequestBytes)))
}

// acquireFailed answers when no instance could take the invocation.
func (p *Proxy) acquireFailed(ctx context.Context, c *call, rec *invoke.Record, err error) {
	switch {
	case errors.Is(err, runtime.ErrNotDeployed):
		fn, gerr := p.store.Get(ctx, functions.Key{Namespace: c.ns, Name: c.name})
		if errors.Is(gerr, functions.ErrNotFound) {
			// Not recorded, so no invocation id to hold.
			c.w.Header().Del(invocationIDHeader)
			writeNotFound(c.w, c.ns, c.name)
			return
		}
		msg := fmt.Sprintf("function %q is not ready", c.name)
		if gerr == nil {
			msg = fmt.Sprintf("function %q is not ready (phase %s", c.name, fn.Status.Phase)
			if fn.Status.Message != "" {
				msg += ": " + fn.Status.Message
			}
			msg += ")"
		}
		p.fail(c, rec, http.StatusServiceUnavailable, msg)
	case errors.Is(err, runtime.ErrOverloaded):
		c.w.Header().Set("Retry-After", "1")
		msg := fmt.Sprintf("function %q is at capacity (max_instances and concurrency reached, and the wait queue is full or nothing freed up in time); retry later", c.name)
		if c.kind != invoke.KindHTTP {
			// A trigger's or job's refusal is one of few, and its caller
			// keeps the invocation id.
			p.fail(c, rec, http.StatusServiceUnavailable, msg)
			return
		}
		// Refusing must cost a fraction of serving, or an overload starves
		// the invocations that got capacity: a refusal on /fn is counted
		// into its function's summary record, not recorded on its own.
		c.w.Header().Del(invocationIDHeader)
		c.refusal = outcomeOverloaded
		p.refusals.add(c.ns, c.name)
		p.refusals.pace()
		writeError(c.w, http.StatusServiceUnavailable, msg)
	case errors.Is(err, runtime.ErrStart):
		p.failedToStart(c, rec, err)
	case errors.Is(err, runtime.ErrUnavailable):
		p.fail(c, rec, http.StatusServiceUnavailable, fmt.Sprintf("function %q cannot run: %s", c.name,
			runtime.PublicMessage(err, "this server runs no function instances")))
	case ctx.Err() != nil:
		rec.StatusCode, rec.Error, c.refusal = 499, "the client closed the request while it waited for an instance", outcomeCancelled
	default:
		p.log.Error("acquiring an instance failed", "namespace", c.ns, "function", c.name, "invocation_id", rec.ID, "error", err)
		p.fail(c, rec, http.StatusInternalServerError, "internal error while starting the function; the server log has the details")
	}
}

// doFailed answers when the invocation failed before its response started.
// The headers the instance's answer had put in the response by then go: a
// function's Cache-Control or Set-Cookie must not ride on the platform's
// error.
func (p *Proxy) doFailed(ctx context.Context, c *call, rec *invoke.Record, t *runtime.Target, err error) {
	h := c.w.Header()
	for k := range h {
		if k != invocationIDHeader {
			delete(h, k)
		}
	}
	var mbe *http.MaxBytesError
	var be *runtime.BodyError
	switch {
	case c.cancellable && ctx.Err() != nil:
		p.fail(c, rec, 499, "the invocation was cancelled: "+context.Cause(ctx).Error())
	case errors.Is(err, runtime.ErrStart):
		p.failedToStart(c, rec, err)
	case errors.Is(err, runtime.ErrTimeout):
		p.fail(c, rec, http.StatusGatewayTimeout, fmt.Sprintf("function %q timed out after %s", c.name, t.Timeout))
	case errors.Is(err, runtime.ErrCrashed):
		p.fail(c, rec, http.StatusBadGateway, fmt.Sprintf("function %q crashed: %s", c.name, runtime.PublicMessage(err, "the instance failed")))
	case errors.As(err, &mbe):
		p.fail(c, rec, http.StatusRequestEntityTooLarge, p.tooLarge())
	case errors.Is(err, runtime.ErrResponseTooLarge):
		p.fail(c, rec, http.StatusBadGateway, fmt.Sprintf("function %q returned a response too large to pass on: %s",
			c.name, runtime.PublicMessage(err, "it exceeds the limit")))
	case errors.As(err, &be):
		p.fail(c, rec, http.StatusBadRequest, "reading the request body failed: "+be.Err.Error())
	default:
		p.log.Error("invocation failed", "namespace", c.ns, "function", c.name, "invocation_id", rec.ID, "error", err)
		p.fail(c, rec, http.StatusInternalServerError, "internal error while invoking the function; the server log has the details")
	}
}

// failedToStart answers for an instance that could not start (ErrStart),
// from Acquire or, for the invocation that its start awaited, from Do.
func (p *Proxy) failedToStart(c *call, rec *invoke.Record, err error) {
	p.fail(c, rec, http.StatusBadGateway, "function failed to start: "+runtime.PublicMessage(err, "the server log has the details"))
}

// fail answers with a JSON error and records it.
func (p *Proxy) fail(c *call, rec *invoke.Record, code int, msg string) {
	rec.StatusCode, c.refusal = code, platformOutcome(code)
	if rec.Error == "" {
		rec.Error = msg
	}
	writeError(c.w, code, msg)
}

// writeNotFound answers 404 for a function the store does not have; such a
// call is not recorded.
func writeNotFound(w http.ResponseWriter, ns, name string) {
	writeError(w, http.StatusNotFound, fmt.Sprintf("function %q not found in namespace %q", name, ns))
}

func writeError(w http.ResponseWriter, code int, msg string) {
	httpx.WriteErrorBody(w, code, httpx.ErrorBody{Error: msg})
}

// serverTiming formats the Server-Timing header: queue wait, cold start
// and handler time in milliseconds.
func serverTiming(rec *invoke.Record, handler time.Duration) string {
	b := make([]byte, 0, 64)
	b = append(b, "queue;dur="...)
	b = strconv.AppendFloat(b, rec.QueueMS, 'f', 3, 64)
	b = append(b, ", cold;dur="...)
	b = strconv.AppendFloat(b, rec.ColdStartMS, 'f', 3, 64)
	b = append(b, ", handler;dur="...)
	b = strconv.AppendFloat(b, ms(handler), 'f', 3, 64)
	return string(b)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
