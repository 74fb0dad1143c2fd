// Package trstore persists triggers and jobs (gorm, SQLite or PostgreSQL):
// it implements triggers.Store and triggers.JobStore.
package trstore

import (
	"context"

	"gorm.io/gorm"

	"sless.kube5s.ru/sless/internal/objstore"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
	"sless.kube5s.ru/sless/modules/triggers"
)

// sentinels are the contract's errors, which the stores' errors wrap.
var sentinels = objstore.Errors{NotFound: triggers.ErrNotFound, AlreadyExists: triggers.ErrAlreadyExists}

// The stores implement the contract.
var (
	_ triggers.Store    = (*Triggers)(nil)
	_ triggers.JobStore = (*Jobs)(nil)
)

// Migrations are the triggers module's schema versions.
func Migrations() []sqldb.Migration {
	return []sqldb.Migration{
		objstore.Migration("triggers", 1, "triggers"),
		objstore.Migration("triggers", 2, "jobs"),
	}
}

// Triggers stores triggers. It is safe for concurrent use.
type Triggers struct {
	s *objstore.Store[triggers.Spec, triggers.Status]
}

// NewTriggers returns the trigger store.
func NewTriggers(db *gorm.DB) *Triggers {
	return &Triggers{s: objstore.New[triggers.Spec, triggers.Status](db, "triggers", "trigger", sentinels)}
}

type triggerObject = objstore.Object[triggers.Spec, triggers.Status]

func toTrigger(o *triggerObject) *triggers.Trigger {
	return &triggers.Trigger{Name: o.Name, Namespace: o.Namespace, Spec: o.Spec, Generation: o.Generation,
		CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt, Status: o.Status}
}

// one converts a store's answer of one object to the API's type.
func one[O, T any](o *O, err error, convert func(*O) *T) (*T, error) {
	if err != nil {
		return nil, err
	}
	return convert(o), nil
}

// all converts a store's answer of several objects to the API's type.
func all[O, T any](objs []*O, err error, convert func(*O) *T) ([]*T, error) {
	if err != nil {
		return nil, err
	}
	out := make([]*T, len(objs))
	for i, o := range objs {
		out[i] = convert(o)
	}
	return out, nil
}

// Keys returns every trigger's key.
func (t *Triggers) Keys(ctx context.Context) ([]triggers.Key, error) { return t.s.Keys(ctx) }

// Create stores a new trigger with generation 1.
func (t *Triggers) Create(ctx context.Context, tr *triggers.Trigger) (*triggers.Trigger, error) {
	o, err := t.s.Create(ctx, &triggerObject{Namespace: tr.Namespace, Name: tr.Name, Function: tr.Function, Spec: tr.Spec})
	return one(o, err, toTrigger)
}

// Get returns one trigger or triggers.ErrNotFound.
func (t *Triggers) Get(ctx context.Context, key triggers.Key) (*triggers.Trigger, error) {
	o, err := t.s.Get(ctx, key.Namespace, key.Name)
	return one(o, err, toTrigger)
}

// List implements triggers.Store.
func (t *Triggers) List(ctx context.Context, ns string, opts triggers.ListOptions) ([]*triggers.Trigger, bool, error) {
	objs, more, err := t.s.List(ctx, ns, opts.After, opts.Limit)
	out, err := all(objs, err, toTrigger)
	return out, more, err
}

// ByFunction returns the triggers of a function.
func (t *Triggers) ByFunction(ctx context.Context, ns, function string) ([]*triggers.Trigger, error) {
	objs, err := t.s.ByFunction(ctx, ns, function)
	return all(objs, err, toTrigger)
}

// All returns every trigger.
func (t *Triggers) All(ctx context.Context) ([]*triggers.Trigger, error) {
	objs, err := t.s.All(ctx)
	return all(objs, err, toTrigger)
}

// UpdateSpec replaces a trigger's spec and increments its generation.
func (t *Triggers) UpdateSpec(ctx context.Context, key triggers.Key, spec triggers.Spec) (*triggers.Trigger, error) {
	o, err := t.s.UpdateSpec(ctx, key.Namespace, key.Name, spec.Function, spec)
	return one(o, err, toTrigger)
}

// UpdateStatus replaces a trigger's status.
func (t *Triggers) UpdateStatus(ctx context.Context, key triggers.Key, st triggers.Status) error {
	return t.s.UpdateStatus(ctx, key.Namespace, key.Name, st)
}

// Delete removes a trigger or fails with triggers.ErrNotFound.
func (t *Triggers) Delete(ctx context.Context, key triggers.Key) error {
	return t.s.Delete(ctx, key.Namespace, key.Name)
}

// Jobs stores jobs. It is safe for concurrent use.
type Jobs struct {
	s *objstore.Store[triggers.JobSpec, triggers.JobStatus]
}

// NewJobs returns the job store.
func NewJobs(db *gorm.DB) *Jobs {
	return &Jobs{s: objstore.New[triggers.JobSpec, triggers.JobStatus](db, "jobs", "job", sentinels)}
}

type jobObject = objstore.Object[triggers.JobSpec, triggers.JobStatus]

func toJob(o *jobObject) *triggers.Job {
	return &triggers.Job{Name: o.Name, Namespace: o.Namespace, JobSpec: o.Spec, Generation: o.Generation,
		CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt, Status: o.Status}
}

// Create stores a new job with generation 1.
func (j *Jobs) Create(ctx context.Context, job *triggers.Job) (*triggers.Job, error) {
	o, err := j.s.Create(ctx, &jobObject{Namespace: job.Namespace, Name: job.Name, Function: job.Function, Spec: job.JobSpec})
	return one(o, err, toJob)
}

// Get returns one job or triggers.ErrNotFound.
func (j *Jobs) Get(ctx context.Context, key triggers.Key) (*triggers.Job, error) {
	o, err := j.s.Get(ctx, key.Namespace, key.Name)
	return one(o, err, toJob)
}

// List implements triggers.JobStore.
func (j *Jobs) List(ctx context.Context, ns string, opts triggers.ListOptions) ([]*triggers.Job, bool, error) {
	objs, more, err := j.s.List(ctx, ns, opts.After, opts.Limit)
	out, err := all(objs, err, toJob)
	return out, more, err
}

// ByFunction returns the jobs of a function.
func (j *Jobs) ByFunction(ctx context.Context, ns, function string) ([]*triggers.Job, error) {
	objs, err := j.s.ByFunction(ctx, ns, function)
	return all(objs, err, toJob)
}

// Keys returns every job's key.
func (j *Jobs) Keys(ctx context.Context) ([]triggers.Key, error) { return j.s.Keys(ctx) }

// UpdateSpec replaces a job's spec and increments its generation.
func (j *Jobs) UpdateSpec(ctx context.Context, key triggers.Key, spec triggers.JobSpec) (*triggers.Job, error) {
	o, err := j.s.UpdateSpec(ctx, key.Namespace, key.Name, spec.Function, spec)
	return one(o, err, toJob)
}

// UpdateStatus replaces a job's status.
func (j *Jobs) UpdateStatus(ctx context.Context, key triggers.Key, st triggers.JobStatus) error {
	return j.s.UpdateStatus(ctx, key.Namespace, key.Name, st)
}

// Delete removes a job or fails with triggers.ErrNotFound.
func (j *Jobs) Delete(ctx context.Context, key triggers.Key) error {
	return j.s.Delete(ctx, key.Namespace, key.Name)
}
