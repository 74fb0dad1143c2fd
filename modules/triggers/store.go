package triggers

import (
	"context"
	"errors"

	"sless.kube5s.ru/sless/modules/meta"
)

// Sentinel errors returned (wrapped) by Store and JobStore implementations.
var (
	ErrNotFound      = errors.New("not found")
	ErrAlreadyExists = errors.New("already exists")
)

// ListOptions selects a page of a list.
type ListOptions = meta.ListOptions

// Store persists triggers. Implementations are safe for concurrent use.
// Writes of the spec and of the status never overwrite each other.
type Store interface {
	// Create stores a new trigger with generation 1 and the zero status,
	// or fails with ErrAlreadyExists.
	Create(ctx context.Context, t *Trigger) (*Trigger, error)
	// Get returns one trigger or ErrNotFound.
	Get(ctx context.Context, key Key) (*Trigger, error)
	// List returns a namespace's triggers ordered by name, after
	// opts.After, at most opts.Limit; more reports whether more follow.
	List(ctx context.Context, namespace string, opts ListOptions) (items []*Trigger, more bool, err error)
	// ByFunction returns the triggers of a function, ordered by name.
	ByFunction(ctx context.Context, namespace, function string) ([]*Trigger, error)
	// All returns every trigger, ordered by namespace and name, for
	// loading the state of /fn at start-up.
	All(ctx context.Context) ([]*Trigger, error)
	// Keys returns every trigger's key, ordered, for a resync after
	// start-up.
	Keys(ctx context.Context) ([]Key, error)
	// UpdateSpec replaces the spec and increments the generation when the
	// spec changes, or fails with ErrNotFound. Whether the same spec
	// increments it too is the store's choice (the SQL store's does,
	// Kubernetes does not).
	UpdateSpec(ctx context.Context, key Key, spec Spec) (*Trigger, error)
	// UpdateStatus replaces the status, or fails with ErrNotFound; the
	// generation is unchanged.
	UpdateStatus(ctx context.Context, key Key, status Status) error
	// Delete removes the trigger or fails with ErrNotFound.
	Delete(ctx context.Context, key Key) error
}

// JobStore persists jobs, with the contract of Store.
type JobStore interface {
	// Create stores a new job with generation 1 and the zero status, or
	// fails with ErrAlreadyExists.
	Create(ctx context.Context, j *Job) (*Job, error)
	// Get returns one job or ErrNotFound.
	Get(ctx context.Context, key Key) (*Job, error)
	// List returns a namespace's jobs ordered by name, after opts.After, at
	// most opts.Limit; more reports whether more follow.
	List(ctx context.Context, namespace string, opts ListOptions) (items []*Job, more bool, err error)
	// ByFunction returns the jobs of a function, ordered by name.
	ByFunction(ctx context.Context, namespace, function string) ([]*Job, error)
	// Keys returns every job's key, ordered, for a resync after start-up.
	Keys(ctx context.Context) ([]Key, error)
	// UpdateSpec replaces the spec and increments the generation when the
	// spec changes, or fails with ErrNotFound, as Store.UpdateSpec.
	UpdateSpec(ctx context.Context, key Key, spec JobSpec) (*Job, error)
	// UpdateStatus replaces the status, or fails with ErrNotFound; the
	// generation is unchanged.
	UpdateStatus(ctx context.Context, key Key, status JobStatus) error
	// Delete removes the job or fails with ErrNotFound.
	Delete(ctx context.Context, key Key) error
}

// ChangeNotifier is told about every write of a trigger or a job so that
// its reconciler looks at it. The embedded mode enqueues the key; in the
// cluster mode the controllers watch the objects and the notifier does
// nothing.
type ChangeNotifier interface {
	TriggerChanged(key Key)
	JobChanged(key Key)
}

// NotifierFuncs adapts two functions to ChangeNotifier.
type NotifierFuncs struct {
	Triggers, Jobs func(Key)
}

// TriggerChanged implements ChangeNotifier.
func (n NotifierFuncs) TriggerChanged(key Key) { n.Triggers(key) }

// JobChanged implements ChangeNotifier.
func (n NotifierFuncs) JobChanged(key Key) { n.Jobs(key) }
