package trstoretest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"sless.kube5s.ru/sless/modules/triggers"
)

// Triggers is a triggers.Store in memory, for the unit tests of what uses
// the store; it passes RunTriggers. The zero value is not usable; call
// NewTriggers.
type Triggers struct {
	m *memory[triggers.Spec, triggers.Status]
}

// Jobs is a triggers.JobStore in memory; it passes RunJobs.
type Jobs struct {
	m *memory[triggers.JobSpec, triggers.JobStatus]
}

// NewTriggers returns an empty trigger store.
func NewTriggers() *Triggers {
	return &Triggers{m: newMemory[triggers.Spec, triggers.Status]("trigger", func(s triggers.Spec) string { return s.Function })}
}

// NewJobs returns an empty job store.
func NewJobs() *Jobs {
	return &Jobs{m: newMemory[triggers.JobSpec, triggers.JobStatus]("job", func(s triggers.JobSpec) string { return s.Function })}
}

var (
	_ triggers.Store    = (*Triggers)(nil)
	_ triggers.JobStore = (*Jobs)(nil)
)

// stored is one object in memory.
type stored[Spec, Status any] struct {
	key                  triggers.Key
	spec                 Spec
	status               Status
	generation           int64
	createdAt, updatedAt time.Time
}

// memory keeps the objects of one kind. Everything that goes in or comes out
// is copied through JSON, as a database or an API server would, so that no
// caller shares a pointer or a byte slice with the store.
type memory[Spec, Status any] struct {
	kind     string
	function func(Spec) string

	mu   sync.Mutex
	objs map[triggers.Key]*stored[Spec, Status]
}

func newMemory[Spec, Status any](kind string, function func(Spec) string) *memory[Spec, Status] {
	return &memory[Spec, Status]{kind: kind, function: function, objs: map[triggers.Key]*stored[Spec, Status]{}}
}

// clone returns a deep copy of v.
func clone[T any](v T) (T, error) {
	var out T
	data, err := json.Marshal(v)
	if err != nil {
		return out, err
	}
	err = json.Unmarshal(data, &out)
	return out, err
}

func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

func (m *memory[Spec, Status]) notFound(k triggers.Key) error {
	return fmt.Errorf("%s %s: %w", m.kind, k, triggers.ErrNotFound)
}

// snapshot returns a copy of o, for a caller.
func (m *memory[Spec, Status]) snapshot(o *stored[Spec, Status]) (*stored[Spec, Status], error) {
	out := *o
	var err1, err2 error
	out.spec, err1 = clone(o.spec)
	out.status, err2 = clone(o.status)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("copying %s %s: %w", m.kind, o.key, err)
	}
	return &out, nil
}

func (m *memory[Spec, Status]) create(ctx context.Context, k triggers.Key, spec Spec) (*stored[Spec, Status], error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objs[k]; ok {
		return nil, fmt.Errorf("%s %s: %w", m.kind, k, triggers.ErrAlreadyExists)
	}
	spec, err := clone(spec)
	if err != nil {
		return nil, err
	}
	t := now()
	o := &stored[Spec, Status]{key: k, spec: spec, generation: 1, createdAt: t, updatedAt: t}
	m.objs[k] = o
	return m.snapshot(o)
}

func (m *memory[Spec, Status]) get(ctx context.Context, k triggers.Key) (*stored[Spec, Status], error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[k]
	if !ok {
		return nil, m.notFound(k)
	}
	return m.snapshot(o)
}

// sorted returns copies of the objects that keep, by namespace and name.
func (m *memory[Spec, Status]) sorted(ctx context.Context, keep func(*stored[Spec, Status]) bool) ([]*stored[Spec, Status], error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := slices.SortedFunc(maps.Keys(m.objs), func(a, b triggers.Key) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	var out []*stored[Spec, Status]
	for _, k := range keys {
		if o := m.objs[k]; keep(o) {
			c, err := m.snapshot(o)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
	}
	return out, nil
}

func (m *memory[Spec, Status]) list(ctx context.Context, ns string, opts triggers.ListOptions) ([]*stored[Spec, Status], bool, error) {
	objs, err := m.sorted(ctx, func(o *stored[Spec, Status]) bool { return o.key.Namespace == ns && o.key.Name > opts.After })
	if err != nil {
		return nil, false, err
	}
	more := len(objs) > opts.Limit
	return objs[:min(len(objs), opts.Limit)], more, nil
}

func (m *memory[Spec, Status]) byFunction(ctx context.Context, ns, function string) ([]*stored[Spec, Status], error) {
	return m.sorted(ctx, func(o *stored[Spec, Status]) bool { return o.key.Namespace == ns && m.function(o.spec) == function })
}

func (m *memory[Spec, Status]) keys(ctx context.Context) ([]triggers.Key, error) {
	objs, err := m.sorted(ctx, func(*stored[Spec, Status]) bool { return true })
	keys := make([]triggers.Key, len(objs))
	for i, o := range objs {
		keys[i] = o.key
	}
	return keys, err
}

func (m *memory[Spec, Status]) updateSpec(ctx context.Context, k triggers.Key, spec Spec) (*stored[Spec, Status], error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[k]
	if !ok {
		return nil, m.notFound(k)
	}
	spec, err := clone(spec)
	if err != nil {
		return nil, err
	}
	o.spec, o.generation, o.updatedAt = spec, o.generation+1, now()
	return m.snapshot(o)
}

func (m *memory[Spec, Status]) updateStatus(ctx context.Context, k triggers.Key, status Status) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[k]
	if !ok {
		return m.notFound(k)
	}
	status, err := clone(status)
	if err != nil {
		return err
	}
	o.status = status
	return nil
}

func (m *memory[Spec, Status]) delete(ctx context.Context, k triggers.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objs[k]; !ok {
		return m.notFound(k)
	}
	delete(m.objs, k)
	return nil
}

func toTrigger(o *stored[triggers.Spec, triggers.Status]) *triggers.Trigger {
	return &triggers.Trigger{Namespace: o.key.Namespace, Name: o.key.Name, Spec: o.spec, Status: o.status,
		Generation: o.generation, CreatedAt: o.createdAt, UpdatedAt: o.updatedAt}
}

func toJob(o *stored[triggers.JobSpec, triggers.JobStatus]) *triggers.Job {
	return &triggers.Job{Namespace: o.key.Namespace, Name: o.key.Name, JobSpec: o.spec, Status: o.status,
		Generation: o.generation, CreatedAt: o.createdAt, UpdatedAt: o.updatedAt}
}

var (
	oneTrigger, allTriggers = lift(toTrigger)
	oneJob, allJobs         = lift(toJob)
)

// Create implements triggers.Store.
func (s *Triggers) Create(ctx context.Context, t *triggers.Trigger) (*triggers.Trigger, error) {
	return oneTrigger(s.m.create(ctx, t.Key(), t.Spec))
}

// Get implements triggers.Store.
func (s *Triggers) Get(ctx context.Context, k triggers.Key) (*triggers.Trigger, error) {
	return oneTrigger(s.m.get(ctx, k))
}

// List implements triggers.Store.
func (s *Triggers) List(ctx context.Context, ns string, opts triggers.ListOptions) ([]*triggers.Trigger, bool, error) {
	objs, more, err := s.m.list(ctx, ns, opts)
	out, err := allTriggers(objs, err)
	return out, more, err
}

// ByFunction implements triggers.Store.
func (s *Triggers) ByFunction(ctx context.Context, ns, function string) ([]*triggers.Trigger, error) {
	return allTriggers(s.m.byFunction(ctx, ns, function))
}

// All implements triggers.Store.
func (s *Triggers) All(ctx context.Context) ([]*triggers.Trigger, error) {
	return allTriggers(s.m.sorted(ctx, func(*stored[triggers.Spec, triggers.Status]) bool { return true }))
}

// Keys implements triggers.Store.
func (s *Triggers) Keys(ctx context.Context) ([]triggers.Key, error) { return s.m.keys(ctx) }

// UpdateSpec implements triggers.Store.
func (s *Triggers) UpdateSpec(ctx context.Context, k triggers.Key, spec triggers.Spec) (*triggers.Trigger, error) {
	return oneTrigger(s.m.updateSpec(ctx, k, spec))
}

// UpdateStatus implements triggers.Store.
func (s *Triggers) UpdateStatus(ctx context.Context, k triggers.Key, st triggers.Status) error {
	return s.m.updateStatus(ctx, k, st)
}

// Delete implements triggers.Store.
func (s *Triggers) Delete(ctx context.Context, k triggers.Key) error { return s.m.delete(ctx, k) }

// Create implements triggers.JobStore.
func (s *Jobs) Create(ctx context.Context, j *triggers.Job) (*triggers.Job, error) {
	return oneJob(s.m.create(ctx, j.Key(), j.JobSpec))
}

// Get implements triggers.JobStore.
func (s *Jobs) Get(ctx context.Context, k triggers.Key) (*triggers.Job, error) {
	return oneJob(s.m.get(ctx, k))
}

// List implements triggers.JobStore.
func (s *Jobs) List(ctx context.Context, ns string, opts triggers.ListOptions) ([]*triggers.Job, bool, error) {
	objs, more, err := s.m.list(ctx, ns, opts)
	out, err := allJobs(objs, err)
	return out, more, err
}

// ByFunction implements triggers.JobStore.
func (s *Jobs) ByFunction(ctx context.Context, ns, function string) ([]*triggers.Job, error) {
	return allJobs(s.m.byFunction(ctx, ns, function))
}

// Keys implements triggers.JobStore.
func (s *Jobs) Keys(ctx context.Context) ([]triggers.Key, error) { return s.m.keys(ctx) }

// UpdateSpec implements triggers.JobStore.
func (s *Jobs) UpdateSpec(ctx context.Context, k triggers.Key, spec triggers.JobSpec) (*triggers.Job, error) {
	return oneJob(s.m.updateSpec(ctx, k, spec))
}

// UpdateStatus implements triggers.JobStore.
func (s *Jobs) UpdateStatus(ctx context.Context, k triggers.Key, st triggers.JobStatus) error {
	return s.m.updateStatus(ctx, k, st)
}

// Delete implements triggers.JobStore.
func (s *Jobs) Delete(ctx context.Context, k triggers.Key) error { return s.m.delete(ctx, k) }
