// Package triggers is the contract of the triggers module: the Trigger and
// Job models of the REST API, the Store and JobStore that persist them, the
// ChangeNotifier that tells their reconcilers about writes, the Runner
// contract that each trigger type (cron, rabbitmq) implements, and the
// Reporter and Warmer that runners use.
package triggers

import (
	"context"
	"encoding/json"
	"time"

	"sless.kube5s.ru/sless/modules/meta"
)

// Trigger types.
const (
	TypeHTTP     = "http"
	TypeCron     = "cron"
	TypeRabbitMQ = "rabbitmq"
)

// Concurrency policies of cron triggers, as Kubernetes CronJobs have them.
const (
	// PolicyAllow lets runs overlap.
	PolicyAllow = "Allow"
	// PolicyForbid skips a run while the previous one is still running.
	PolicyForbid = "Forbid"
	// PolicyReplace cancels the running run and starts the new one.
	PolicyReplace = "Replace"
)

// Auth modes of http triggers.
const (
	// AuthNone: /fn serves anyone (the default).
	AuthNone = "none"
	// AuthToken: /fn serves only callers with a token of the function's
	// namespace (or an invoker token of the function).
	AuthToken = "token"
)

// HTTPSpec holds the fields of http triggers.
type HTTPSpec struct {
	// Auth is none (default: public) or token. A function is private on
	// /fn while any of its enabled http triggers says token.
	Auth string `json:"auth,omitempty"`
	// Ingress, when set, asks for a Kubernetes Ingress that routes Host's
	// /fn/{namespace}/{function} to the sless server (the kubernetes mode
	// only; the embedded mode refuses it). It exists while the trigger is
	// enabled: a disabled trigger routes nothing.
	Ingress *IngressSpec `json:"ingress,omitempty"`
}

// IngressSpec is the Ingress of an http trigger. The Ingress routes the
// path /fn/{namespace}/{function} (prefix) of Host to the sless server's
// Service, never to the function's pods, so that every call goes through
// /fn's gate and ledger.
type IngressSpec struct {
	// Host is the DNS name the Ingress serves, such as hello.example.com.
	// Required.
	Host string `json:"host"`
	// ClassName is the IngressClass; default none: the cluster's default
	// class.
	ClassName string `json:"class_name,omitempty"`
	// TLSSecret names a Secret of type kubernetes.io/tls in the sless
	// server's namespace (where the Ingress lives) with Host's certificate;
	// default none: plain HTTP.
	TLSSecret string `json:"tls_secret,omitempty"`
}

// CronSpec holds the fields of cron triggers.
type CronSpec struct {
	// Schedule is a standard 5-field cron expression, "@every <duration>" or
	// a descriptor such as "@hourly".
	Schedule string `json:"schedule,omitempty"`
	// Timezone is an IANA time zone name; default UTC.
	Timezone string `json:"timezone,omitempty"`
	// Payload is the JSON event of every run; default null.
	Payload json.RawMessage `json:"payload,omitempty"`
	// ConcurrencyPolicy is Allow (default), Forbid or Replace.
	ConcurrencyPolicy string `json:"concurrency_policy,omitempty"`
	// PrewarmSeconds starts an instance this long before each run.
	PrewarmSeconds int `json:"prewarm_seconds,omitempty"`
}

// RabbitMQSpec holds the fields of rabbitmq triggers.
type RabbitMQSpec struct {
	// URL is the broker, amqp:// or amqps://, with credentials. API
	// responses show it with the password replaced by "***".
	URL string `json:"url,omitempty"`
	// Queue is consumed; it is declared (durable) when missing.
	Queue string `json:"queue,omitempty"`
	// Exchange and RoutingKey, when set, bind the queue to an existing
	// exchange.
	Exchange   string `json:"exchange,omitempty"`
	RoutingKey string `json:"routing_key,omitempty"`
	// Prefetch is the most unacknowledged messages in flight; default 10.
	Prefetch int `json:"prefetch,omitempty"`
	// MaxRetries is how many times a failed message is retried, with
	// backoff, before it is dead-lettered; default 3.
	MaxRetries *int `json:"max_retries,omitempty"`
	// DeadLetterExchange or DeadLetterQueue receive the messages that
	// failed every retry; with neither, they are rejected (the queue's own
	// dead-letter settings apply).
	DeadLetterExchange string `json:"dead_letter_exchange,omitempty"`
	DeadLetterQueue    string `json:"dead_letter_queue,omitempty"`
}

// Spec is a trigger's desired state.
type Spec struct {
	// Function is the name of the function in the trigger's namespace.
	Function string `json:"function"`
	// Type is http, cron or rabbitmq.
	Type string `json:"type"`
	// Enabled defaults to true. Once none of a function's http triggers is
	// enabled, /fn answers 404 for it and it scales to zero; a disabled cron
	// or rabbitmq trigger stops firing or consuming. Nothing is deleted.
	Enabled *bool `json:"enabled,omitempty"`
	HTTPSpec
	CronSpec
	RabbitMQSpec
}

// IsEnabled reports the effective Enabled.
func (s *Spec) IsEnabled() bool { return s.Enabled == nil || *s.Enabled }

// Trigger phases.
const (
	PhaseActive   = "Active"
	PhaseDisabled = "Disabled"
	// PhaseError: the trigger cannot run (its function is missing, its
	// broker refuses it, its spec is refused by its runner); Message says
	// why. A missing function is looked up again and a broker retried; a
	// refused spec waits for a change of the trigger.
	PhaseError = "Error"
)

// Status is a trigger's observed state.
type Status struct {
	Phase   string `json:"phase"`
	Message string `json:"message,omitempty"`
	// LastFiredAt is when the trigger last invoked its function.
	LastFiredAt *time.Time `json:"last_fired_at,omitempty"`
	// LastError is the last failure of an invocation or of the trigger
	// itself, or the reason of the last skip or dead letter, and LastErrorAt
	// when it happened.
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	// NextFireAt is a cron trigger's next run.
	NextFireAt *time.Time `json:"next_fire_at,omitempty"`
	// Counts since the trigger was created.
	Fired        int64 `json:"fired"`
	Succeeded    int64 `json:"succeeded"`
	Failed       int64 `json:"failed"`
	Skipped      int64 `json:"skipped"`
	DeadLettered int64 `json:"dead_lettered"`
	// ObservedGeneration is the generation this status describes.
	ObservedGeneration int64 `json:"observed_generation"`
}

// Trigger is a trigger as the REST API shows it.
type Trigger struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Spec
	Generation int64     `json:"generation"`
	CreatedAt  time.Time `json:"created_at,omitzero"`
	UpdatedAt  time.Time `json:"updated_at,omitzero"`
	Status     Status    `json:"status"`
}

// Key names a trigger or a job; it is the key of every module.
type Key = meta.Key

// Key returns the trigger's key.
func (t *Trigger) Key() Key { return Key{Namespace: t.Namespace, Name: t.Name} }

// Event kinds reported by runners.
const (
	// EventFired: an invocation started.
	EventFired = "fired"
	// EventSucceeded / EventFailed: an invocation ended (2xx / otherwise).
	EventSucceeded = "succeeded"
	EventFailed    = "failed"
	// EventSkipped: a run did not start (a Forbid overlap, a redelivered
	// message whose invocation already settled).
	EventSkipped = "skipped"
	// EventDeadLettered: a message failed every retry and left the queue.
	EventDeadLettered = "dead_lettered"
	// EventError: the trigger itself fails (a broker connection, which it
	// retries; a schedule with no next date, which ends it).
	EventError = "error"
	// EventHealthy: the trigger recovered from an EventError.
	EventHealthy = "healthy"
	// EventScheduled: a cron trigger's next run time is known.
	EventScheduled = "scheduled"
)

// Event is something that happened to a running trigger.
type Event struct {
	Kind string
	At   time.Time
	// Message says why, for failures, skips, dead letters and errors.
	Message string
	// Next is the next run of EventScheduled.
	Next time.Time
}

// Reporter receives the events of running triggers and folds them into the
// triggers' status. It is safe for concurrent use and never blocks for long.
type Reporter interface {
	Report(key Key, ev Event)
}

// Runner runs the triggers of one type. Implementations are safe for
// concurrent use.
type Runner interface {
	// Apply makes the trigger run as t says: it starts it, restarts it when
	// its spec changed, or removes it when t is disabled. It is idempotent
	// and returns quickly; connecting and retrying happen in the background
	// and are reported as events. A spec the runner cannot use (a schedule
	// it cannot parse) is an error.
	Apply(ctx context.Context, t *Trigger) error
	// Remove stops the trigger; removing an unknown trigger does nothing.
	// In-flight invocations finish in the background.
	Remove(key Key)
	// Stop stops every trigger and waits, until ctx ends, for the
	// invocations they started; then it cancels them and returns an error.
	Stop(ctx context.Context) error
}

// Warmer starts an instance of a function ahead of need and keeps one
// until the invocation expected at until; runtime.Instances implements it.
type Warmer interface {
	Warm(ctx context.Context, function Key, until time.Time) error
}

// JobSpec is a FunctionJob's desired state: run Function once with Payload
// for every new RunID.
type JobSpec struct {
	Function string          `json:"function"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	// RunID 0 means do not run; raising it runs the function once more.
	// Lowering it does nothing.
	RunID int64 `json:"run_id"`
}

// Job phases.
const (
	JobPending   = "Pending"
	JobRunning   = "Running"
	JobSucceeded = "Succeeded"
	JobFailed    = "Failed"
)

// MaxJobResultBytes caps JobStatus.Result.
const MaxJobResultBytes = 64 << 10

// JobStatus is a job's observed state: the run of RunID.
type JobStatus struct {
	Phase string `json:"phase"`
	// RunID is the run this status describes; a spec RunID above it starts
	// a new run.
	RunID int64 `json:"run_id"`
	// InvocationID identifies the run's invocation in the ledger.
	InvocationID string     `json:"invocation_id,omitempty"`
	StartedAt    *time.Time `json:"started_at,omitempty"`
	FinishedAt   *time.Time `json:"finished_at,omitempty"`
	// StatusCode is the function's HTTP status.
	StatusCode int `json:"status_code,omitempty"`
	// Result is the function's response body, at most MaxJobResultBytes.
	Result string `json:"result,omitempty"`
	// Error says why the run failed.
	Error              string `json:"error,omitempty"`
	ObservedGeneration int64  `json:"observed_generation"`
}

// Job is a FunctionJob as the REST API shows it.
type Job struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	JobSpec
	Generation int64     `json:"generation"`
	CreatedAt  time.Time `json:"created_at,omitzero"`
	UpdatedAt  time.Time `json:"updated_at,omitzero"`
	Status     JobStatus `json:"status"`
}

// Key returns the job's key.
func (j *Job) Key() Key { return Key{Namespace: j.Namespace, Name: j.Name} }
