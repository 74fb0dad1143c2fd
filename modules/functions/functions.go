// Package functions is the contract of the functions module: the Function
// model of the REST API, its validation, the Store that persists it and the
// notifications that drive reconciliation.
package functions

import (
	"context"
	"errors"
	"time"

	"sless.kube5s.ru/sless/modules/meta"
)

// Sentinel errors returned (wrapped) by Store implementations.
var (
	ErrNotFound      = errors.New("function not found")
	ErrAlreadyExists = errors.New("function already exists")
)

// Phase is the coarse state of a function.
type Phase string

// Phases of a function's lifecycle.
const (
	// PhasePending: no code uploaded yet, or a change is waiting for the reconciler.
	PhasePending Phase = "Pending"
	// PhaseBuilding: the uploaded code is being built.
	PhaseBuilding Phase = "Building"
	// PhaseReady: the current code is built and the function can be invoked.
	PhaseReady Phase = "Ready"
	// PhaseFailed: the build of the current code failed; Message says why
	// (and which code, if any, still serves).
	PhaseFailed Phase = "Failed"
)

// Spec is the desired state a user writes.
type Spec struct {
	// Runtime is a registered runtime name such as "python3.11" or "nodejs20".
	Runtime string `json:"runtime"`
	// Handler is "<file>.<function>"; default: the runtime's default handler.
	Handler string `json:"handler,omitempty"`
	// Env is the function's environment.
	Env map[string]string `json:"env,omitempty"`
	// TimeoutSeconds bounds one invocation; default 30.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// MemoryMB bounds an instance's memory; default 256.
	MemoryMB int `json:"memory_mb,omitempty"`
	// MinInstances stay warm; default 0 (scale to zero).
	MinInstances int `json:"min_instances"`
	// MaxInstances caps instances; default 10.
	MaxInstances int `json:"max_instances,omitempty"`
	// Concurrency caps in-flight invocations per instance; default 1.
	Concurrency int `json:"concurrency,omitempty"`
	// Egress is what instances may reach over the network: "all" (default)
	// or "public" (see runtime.EgressPublic).
	Egress string `json:"egress,omitempty"`
}

// Status is the observed state, written by the reconciler only. All of it is
// serialised, so that it survives a round trip through any store (a row, a
// custom resource's status); the REST API leaves the reconciler's
// bookkeeping out (see Function.Public).
type Status struct {
	Phase   Phase  `json:"phase"`
	Message string `json:"message,omitempty"`
	// CodeSHA256 is the code of the artifact that serves invocations.
	CodeSHA256 string `json:"code_sha256,omitempty"`
	// BuildLog is the output of the last build that produced any.
	BuildLog string `json:"build_log,omitempty"`
	// ObservedGeneration is the generation this status describes.
	ObservedGeneration int64 `json:"observed_generation"`
	// UpdatedAt is when the phase or message last changed.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// Conditions detail the phase: BuildSucceeded and Ready, one of each
	// once the function was reconciled.
	Conditions []Condition `json:"conditions,omitempty"`

	// Artifact is the builder's reference of the serving artifact (a
	// directory of the server in the embedded mode). Bookkeeping.
	Artifact string `json:"artifact,omitempty"`
	// ArtifactRuntime and ArtifactHandler are the runtime and handler
	// Artifact was built and checked for: the function serves with them, not
	// with a newer spec's, until a build for the newer spec succeeds.
	// Bookkeeping.
	ArtifactRuntime string `json:"artifact_runtime,omitempty"`
	ArtifactHandler string `json:"artifact_handler,omitempty"`
	// BuildKey is the key of the build running or last finished; with the
	// BuildSucceeded condition it is the build's state machine, so that the
	// same code is never built twice. Bookkeeping.
	BuildKey string `json:"build_key,omitempty"`
}

// Condition types of a function's status.
const (
	// ConditionBuildSucceeded: True once the current code (with the current
	// runtime and handler) is built, False when its build failed, Unknown
	// while it builds or before code is uploaded.
	ConditionBuildSucceeded = "BuildSucceeded"
	// ConditionReady is the roll-up: True when the current spec and code
	// serve invocations (phase Ready), False when they cannot until the
	// user changes something, Unknown while the reconciler works on it.
	ConditionReady = "Ready"
)

// ConditionStatus is True, False or Unknown.
type ConditionStatus string

// Condition statuses.
const (
	ConditionTrue    ConditionStatus = "True"
	ConditionFalse   ConditionStatus = "False"
	ConditionUnknown ConditionStatus = "Unknown"
)

// Reasons of the conditions: one CamelCase word each, stable for clients.
const (
	// ReasonNoCode: no code was uploaded yet.
	ReasonNoCode = "NoCode"
	// ReasonBuilding: the build of the current code runs (or waits to run).
	ReasonBuilding = "Building"
	// ReasonBuilt: the current code is built (BuildSucceeded True).
	ReasonBuilt = "Built"
	// ReasonBuildFailed: the build failed because of the code or its
	// dependencies; the message and the build log say why.
	ReasonBuildFailed = "BuildFailed"
	// ReasonBuildError: the build failed because of the server; its log has
	// the details.
	ReasonBuildError = "BuildError"
	// ReasonDeploying: the build is done and its instances are not serving
	// yet.
	ReasonDeploying = "Deploying"
	// ReasonServing: the current spec and code serve (Ready True).
	ReasonServing = "Serving"
	// ReasonUnsupported: the executor cannot run the function as its spec
	// asks on this server (public egress without the kernel's support).
	ReasonUnsupported = "Unsupported"
)

// Condition is one aspect of a function's state, the way a Kubernetes
// status condition (metav1.Condition) describes it.
type Condition struct {
	// Type is ConditionBuildSucceeded or ConditionReady.
	Type   string          `json:"type"`
	Status ConditionStatus `json:"status"`
	// Reason is one of the Reason constants.
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
	// ObservedGeneration is the generation the condition was set for.
	ObservedGeneration int64 `json:"observed_generation"`
	// LastTransitionTime is when Status last changed, to the second at
	// least (a Kubernetes condition keeps no more).
	LastTransitionTime time.Time `json:"last_transition_time,omitzero"`
}

// Condition returns the condition of type t, or nil.
func (s *Status) Condition(t string) *Condition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

// SetCondition sets c in s, replacing the condition of its type, with the
// LastTransitionTime of the old one unless the Status changed (then now).
func (s *Status) SetCondition(c Condition, now time.Time) {
	old := s.Condition(c.Type)
	if old == nil {
		c.LastTransitionTime = now
		s.Conditions = append(s.Conditions, c)
		return
	}
	c.LastTransitionTime = old.LastTransitionTime
	if old.Status != c.Status || c.LastTransitionTime.IsZero() {
		c.LastTransitionTime = now
	}
	*old = c
}

// Function is a function as the REST API shows it.
type Function struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Spec
	// CodeSHA256 is the SHA-256 of the last uploaded zip; empty before the
	// first upload.
	CodeSHA256 string `json:"code_sha256,omitempty"`
	// Generation increases on every change of Spec or code.
	Generation int64     `json:"generation"`
	CreatedAt  time.Time `json:"created_at,omitzero"`
	UpdatedAt  time.Time `json:"updated_at,omitzero"`
	// Status is the server's, ignored in requests; a client's zero status
	// (a function it is about to create) is left out of its JSON. The
	// server's always has a phase.
	Status Status `json:"status,omitzero"`
}

// Key names a function; it is the key of every module.
type Key = meta.Key

// Public returns a copy of f as the REST API shows it: without the status'
// bookkeeping, which is the reconciler's (an artifact is a path on the
// server).
func (f *Function) Public() *Function {
	out := *f
	out.Status.Artifact, out.Status.ArtifactRuntime, out.Status.ArtifactHandler, out.Status.BuildKey = "", "", "", ""
	return &out
}

// Key returns the function's key.
func (f *Function) Key() Key { return Key{Namespace: f.Namespace, Name: f.Name} }

// ListOptions selects a page of a list.
type ListOptions = meta.ListOptions

// Store persists functions. Implementations are safe for concurrent use.
// Writes of the spec and of the status never overwrite each other.
type Store interface {
	// Create stores a new function with generation 1, or fails with
	// ErrAlreadyExists.
	Create(ctx context.Context, fn *Function) (*Function, error)
	// Get returns one function or ErrNotFound.
	Get(ctx context.Context, key Key) (*Function, error)
	// List returns a namespace's functions ordered by name, after
	// opts.After, at most opts.Limit; more reports whether more follow.
	List(ctx context.Context, namespace string, opts ListOptions) (items []*Function, more bool, err error)
	// Keys returns every function's key, for a resync after start-up and
	// for finding the artifacts in use.
	Keys(ctx context.Context) ([]Key, error)
	// UpdateSpec replaces the spec and increments the generation when the
	// spec changes. Whether the same spec increments it too is the store's
	// choice (the SQL store's does, Kubernetes does not), as for SetCode.
	UpdateSpec(ctx context.Context, key Key, spec Spec) (*Function, error)
	// SetCode records an uploaded zip and increments the generation when
	// the code changes.
	SetCode(ctx context.Context, key Key, codeSHA256 string) (*Function, error)
	// UpdateStatus replaces the status.
	UpdateStatus(ctx context.Context, key Key, status Status) error
	// Delete removes the function or fails with ErrNotFound.
	Delete(ctx context.Context, key Key) error
}

// ChangeNotifier is told about every write to a function so that the
// reconciler looks at it. The embedded mode enqueues the key; in the cluster
// mode the controllers watch the objects and the notifier does nothing.
type ChangeNotifier interface {
	Changed(key Key)
}

// Suspension tells whether a function is switched off for HTTP traffic (it
// has http triggers and all are disabled), which scales it to zero in place.
type Suspension interface {
	Suspended(ctx context.Context, key Key) (bool, error)
}

// Dependents deletes what other modules keep for a function (its triggers
// and jobs) when the function is deleted, so that none of it outlives the
// function and comes back to life with a new function of the same name.
type Dependents interface {
	// DeleteDependents deletes the objects that belong to key and returns
	// their names by kind ("triggers", "jobs"; every kind present, names
	// sorted). Once it returns, none of them runs again (in the cluster
	// mode: once the leader, which runs them, saw the deletions, which its
	// watches tell it within moments). It is idempotent
	// and safe for concurrent use.
	DeleteDependents(ctx context.Context, key Key) (map[string][]string, error)
}

// Deletion is the answer to deleting a function.
type Deletion struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Deleted lists what was deleted with the function: names by kind, as
	// Dependents returns them.
	Deleted map[string][]string `json:"deleted"`
}

// NotifierFunc adapts a function to ChangeNotifier.
type NotifierFunc func(Key)

// Changed implements ChangeNotifier.
func (f NotifierFunc) Changed(key Key) { f(key) }
