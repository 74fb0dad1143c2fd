// Package invoke is the contract of the invoke module: the Invoker that runs
// a function once (for triggers, jobs and the CLI), and the Ledger that
// records every invocation.
package invoke

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Trigger kinds recorded on invocations.
const (
	KindHTTP     = "http"
	KindCron     = "cron"
	KindRabbitMQ = "rabbitmq"
	KindJob      = "job"
	KindCLI      = "cli"
)

// What a run interrupted by a stop of the server (a crash, kill -9, a power
// loss) is recorded with when the server starts again: the run's outcome is
// unknown, so it is a failure of the server's, like a function that failed
// to answer.
const (
	InterruptedStatus = 502
	InterruptedError  = "interrupted: the server stopped during the run"
)

// ErrNotFound is returned (wrapped) for an unknown invocation.
var ErrNotFound = errors.New("invocation not found")

// Record is one invocation as the ledger keeps it and the API shows it.
type Record struct {
	// ID is a UUIDv7: ordering ids orders invocations by start time.
	ID        string `json:"id"`
	Namespace string `json:"namespace"`
	Function  string `json:"function"`
	// TriggerKind is one of the Kind constants; TriggerName names the
	// trigger or job, empty for http and cli.
	TriggerKind string    `json:"trigger_kind"`
	TriggerName string    `json:"trigger_name,omitempty"`
	Method      string    `json:"method"`
	Path        string    `json:"path"`
	StartedAt   time.Time `json:"started_at"`
	// Duration is the whole invocation as the platform saw it; Queue the
	// wait for capacity, ColdStart the start of an instance (zero when warm),
	// Handler the handler's own time as the wrapper measured it.
	DurationMS  float64 `json:"duration_ms"`
	QueueMS     float64 `json:"queue_ms"`
	ColdStart   bool    `json:"cold_start"`
	ColdStartMS float64 `json:"cold_start_ms"`
	HandlerMS   float64 `json:"handler_ms"`
	// StatusCode is the HTTP status the caller got; 502 when the instance
	// failed after the head went out (the client's connection was aborted);
	// InterruptedStatus for a run a stop of the server interrupted.
	StatusCode int `json:"status_code"`
	// Error says why the invocation failed: the handler's exception, a
	// timeout, a crash; empty on success.
	Error         string `json:"error,omitempty"`
	RequestBytes  int64  `json:"request_bytes"`
	ResponseBytes int64  `json:"response_bytes"`
	// TraceID is the W3C trace id of the invocation (32 lower-case hex
	// digits): the caller's, from the traceparent header of /fn, or a new
	// one. The invocation's own span id is the last 16 hex digits of its
	// ID. Empty in records made before traces were kept.
	TraceID string `json:"trace_id,omitempty"`
	// Logs is what the handler printed (capped by the wrapper); only Get
	// returns it.
	Logs string `json:"logs,omitempty"`
}

// Query selects invocations of one namespace, newest first.
type Query struct {
	// Function, when set, selects one function's invocations.
	Function string
	// Status is "" (all), "success" (status < 400), "error" (status >= 400)
	// or one status code such as "504".
	Status string
	// TriggerKind and TriggerName, when set, select what caused them.
	TriggerKind, TriggerName string
	// Limit is the page size; 0 means 50, at most 500 (validation.PageSize).
	Limit int
	// Continue is the continue token of the previous page: its last
	// record's id.
	Continue string
}

// Ledger records invocations. Implementations are safe for concurrent use.
type Ledger interface {
	// Record keeps r durably and returns without waiting for the database:
	// once it returns, r survives a crash of the server, and it is written
	// to the database in batches off the request path. It never blocks on
	// the database. When the local journal cannot be written (a full disk),
	// r is held in memory until it can, and Accepting fails meanwhile.
	Record(r *Record)
	// Begin keeps durably that r (its id, function, trigger and start) is
	// running, for a run a crash must not hide: a trigger's or a job's.
	// When the server stops before end is called, the next start records
	// r as interrupted (status InterruptedStatus, error
	// InterruptedError). Call end after Record(r), or when nothing is
	// recorded: once end returns, r's record survives a power cut too, not
	// only a crash, so that what the caller does after the run (a job's
	// outcome, a message's acknowledgement) never outlives the record.
	// Begin fails, and nothing should run, when the start cannot be kept.
	Begin(r *Record) (end func(), err error)
	// Accepting reports, from memory, whether Record can keep records
	// durably now; its error says why not in terms a client can read. The
	// proxy refuses invocations while it fails.
	Accepting() error
	// List returns a page of records without logs, newest first, and the
	// cursor of the next page ("" at the end).
	List(ctx context.Context, namespace string, q Query) ([]*Record, string, error)
	// Get returns one record with its logs, or ErrNotFound. A record
	// recorded before Get is called is found.
	Get(ctx context.Context, namespace, id string) (*Record, error)
}

// Request is an invocation made without an HTTP client, by a trigger, a job
// or the CLI.
type Request struct {
	Namespace, Function string
	// InvocationID, when set, is the id the invocation gets (a job records
	// it before the run, to find the run in the ledger after a restart);
	// otherwise a new one.
	InvocationID string
	// Method and Path default to POST and "/".
	Method, Path string
	Header       http.Header
	Body         []byte
	// TriggerKind and TriggerName are recorded on the invocation;
	// TriggerMeta adds fields to the handler's context.trigger (such as a
	// message's metadata).
	TriggerKind, TriggerName string
	TriggerMeta              map[string]any
}

// Response is the function's answer to a Request.
type Response struct {
	InvocationID string
	StatusCode   int
	Header       http.Header
	Body         []byte
	// Error is the recorded error, empty on success.
	Error string
}

// Access is how /fn serves a function.
type Access struct {
	// Exposed is set when an enabled http trigger exposes the function.
	Exposed bool
	// TokenRequired is set when one of them has auth "token": callers need
	// a token that may invoke the function, checked before an instance is
	// acquired.
	TokenRequired bool
}

// Exposure decides which functions /fn serves, and to whom: those with an
// enabled http trigger. Implementations answer from memory; the proxy asks
// on every request.
type Exposure interface {
	Access(namespace, function string) Access
}

// Invoker runs a function once through the same path as /fn: the same
// instances, limits, timeouts and ledger.
type Invoker interface {
	Invoke(ctx context.Context, req Request) (*Response, error)
}

// FunctionStats are one function's invocations of a recent window (the
// last hour) as the server that answers counted them when they ended.
type FunctionStats struct {
	Function string `json:"function"`
	// WindowSeconds is the length of the window the figures cover.
	WindowSeconds int `json:"window_seconds"`
	// Invocations ended in the window, refusals at capacity included.
	Invocations int64 `json:"invocations"`
	// RatePerSecond is Invocations divided by WindowSeconds.
	RatePerSecond float64 `json:"rate_per_second"`
	// Errors are the invocations that ended other than with the function's
	// 2xx, 3xx or 4xx: its 5xx, timeouts, crashes, refusals at capacity,
	// cancellations and the server's errors (as the metrics' outcome
	// label counts them).
	Errors int64 `json:"errors"`
	// ColdStarts are the invocations that started an instance.
	ColdStarts int64 `json:"cold_starts"`
	// P50MS and P99MS estimate the median and the 99th percentile of the
	// invocations' duration in milliseconds, from the buckets of
	// sless_invocation_duration_seconds (as histogram_quantile does); 0
	// when none ran.
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
}
