// Package crstore is the triggers.Store and triggers.JobStore of the
// cluster mode: triggers and jobs are Trigger and FunctionJob custom
// resources (api/v1alpha1) in the Kubernetes namespace of their API
// namespace (names.Namespace), read and written through the API server.
//
// The generation is the object's metadata.generation, which the API server
// increments when the spec changes (an update to the same spec keeps it).
// A spec write replaces the whole spec in one JSON patch and a status write
// the whole status subresource, so neither overwrites the other and
// concurrent writers never conflict. ByFunction selects on spec.function,
// a selectable field of both resources. How lists are paged is described at
// kubestore.Page.
package crstore

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.kube5s.ru/sless/api/v1alpha1"
	"sless.kube5s.ru/sless/internal/crconv"
	"sless.kube5s.ru/sless/internal/kubestore"
	"sless.kube5s.ru/sless/modules/triggers"
)

// Options configure the stores.
type Options = kubestore.Options

// functionField is the selectable field of triggers and jobs that names
// their function.
const functionField = "spec.function"

// Triggers keeps triggers as Trigger custom resources. It is safe for
// concurrent use.
type Triggers struct {
	s *kubestore.Store
}

// Jobs keeps jobs as FunctionJob custom resources. It is safe for
// concurrent use.
type Jobs struct {
	s *kubestore.Store
}

var (
	_ triggers.Store    = (*Triggers)(nil)
	_ triggers.JobStore = (*Jobs)(nil)
)

// NewTriggers returns a trigger store over c, a client whose scheme has
// api/v1alpha1 and that reads from the API server rather than from a
// cache.
func NewTriggers(c client.Client, opts Options) *Triggers {
	kind := kubestore.Kind{Name: "trigger", ErrNotFound: triggers.ErrNotFound, ErrAlreadyExists: triggers.ErrAlreadyExists}
	return &Triggers{s: kubestore.New(c, kind, opts)}
}

// NewJobs returns a job store over c, as NewTriggers.
func NewJobs(c client.Client, opts Options) *Jobs {
	kind := kubestore.Kind{Name: "job", ErrNotFound: triggers.ErrNotFound, ErrAlreadyExists: triggers.ErrAlreadyExists}
	return &Jobs{s: kubestore.New(c, kind, opts)}
}

// triggersOf returns the triggers of crs, in API namespace ns.
func triggersOf(crs []*v1alpha1.Trigger, ns string) []*triggers.Trigger {
	out := make([]*triggers.Trigger, len(crs))
	for i, cr := range crs {
		out[i] = crconv.TriggerFromCR(cr, ns)
	}
	return out
}

// KeyOf returns the key of name in Kubernetes namespace k8sNS, with the
// API namespace of the store's namespace k8sNS (the key of a Trigger
// there, or of another object of the store's namespaces), and false when
// k8sNS is none of the store's.
func (s *Triggers) KeyOf(ctx context.Context, k8sNS, name string) (triggers.Key, bool, error) {
	return s.s.KeyOf(ctx, k8sNS, name)
}

// Create implements triggers.Store.
func (s *Triggers) Create(ctx context.Context, t *triggers.Trigger) (*triggers.Trigger, error) {
	cr := crconv.TriggerToCR(t)
	cr.Status = v1alpha1.TriggerStatus{}
	if err := s.s.Create(ctx, t.Key(), cr); err != nil {
		return nil, err
	}
	return crconv.TriggerFromCR(cr, t.Namespace), nil
}

// GetCR returns the Trigger custom resource of key, as stored (with its
// finalizers and deletion time, which the REST API's trigger does not
// have).
func (s *Triggers) GetCR(ctx context.Context, key triggers.Key) (*v1alpha1.Trigger, error) {
	var cr v1alpha1.Trigger
	if err := s.s.Get(ctx, key, &cr); err != nil {
		return nil, err
	}
	return &cr, nil
}

// EnsureFinalizer adds finalizer name to the trigger of key unless it is
// being deleted, and reports whether it is; a missing trigger is not being
// deleted (nil error).
func (s *Triggers) EnsureFinalizer(ctx context.Context, key triggers.Key, name string) (bool, error) {
	return s.s.EnsureFinalizer(ctx, key, &v1alpha1.Trigger{}, name)
}

// RemoveFinalizer removes finalizer name from the trigger of key; a
// missing trigger is not an error.
func (s *Triggers) RemoveFinalizer(ctx context.Context, key triggers.Key, name string) error {
	return s.s.RemoveFinalizer(ctx, key, &v1alpha1.Trigger{}, name)
}

// Get implements triggers.Store.
func (s *Triggers) Get(ctx context.Context, key triggers.Key) (*triggers.Trigger, error) {
	cr, err := s.GetCR(ctx, key)
	if err != nil {
		return nil, err
	}
	return crconv.TriggerFromCR(cr, key.Namespace), nil
}

// List implements triggers.Store; see kubestore.Page for its cost.
func (s *Triggers) List(ctx context.Context, namespace string, opts triggers.ListOptions) ([]*triggers.Trigger, bool, error) {
	crs, more, err := kubestore.Page[*v1alpha1.Trigger](ctx, s.s, &v1alpha1.TriggerList{}, namespace, opts)
	if err != nil {
		return nil, false, err
	}
	return triggersOf(crs, namespace), more, nil
}

// ByFunction implements triggers.Store.
func (s *Triggers) ByFunction(ctx context.Context, namespace, function string) ([]*triggers.Trigger, error) {
	crs, err := kubestore.List[*v1alpha1.Trigger](ctx, s.s, &v1alpha1.TriggerList{}, namespace,
		client.MatchingFields{functionField: function})
	if err != nil {
		return nil, err
	}
	return triggersOf(crs, namespace), nil
}

// All implements triggers.Store.
func (s *Triggers) All(ctx context.Context) ([]*triggers.Trigger, error) {
	items, err := kubestore.All[*v1alpha1.Trigger](ctx, s.s, &v1alpha1.TriggerList{})
	if err != nil {
		return nil, err
	}
	out := make([]*triggers.Trigger, len(items))
	for i, it := range items {
		out[i] = crconv.TriggerFromCR(it.Object, it.Namespace)
	}
	return out, nil
}

// Keys implements triggers.Store.
func (s *Triggers) Keys(ctx context.Context) ([]triggers.Key, error) {
	return s.s.Keys(ctx, v1alpha1.GroupVersion.WithKind("TriggerList"))
}

// UpdateSpec implements triggers.Store.
func (s *Triggers) UpdateSpec(ctx context.Context, key triggers.Key, spec triggers.Spec) (*triggers.Trigger, error) {
	var cr v1alpha1.Trigger
	if err := s.s.Replace(ctx, key, &cr, "/spec", crconv.TriggerSpecToCR(spec)); err != nil {
		return nil, err
	}
	return crconv.TriggerFromCR(&cr, key.Namespace), nil
}

// UpdateStatus implements triggers.Store.
func (s *Triggers) UpdateStatus(ctx context.Context, key triggers.Key, status triggers.Status) error {
	return s.s.Replace(ctx, key, &v1alpha1.Trigger{}, "/status", crconv.TriggerStatusToCR(status))
}

// Delete implements triggers.Store.
func (s *Triggers) Delete(ctx context.Context, key triggers.Key) error {
	return s.s.Delete(ctx, key, &v1alpha1.Trigger{})
}

// jobsOf returns the jobs of crs, in API namespace ns.
func jobsOf(crs []*v1alpha1.FunctionJob, ns string) []*triggers.Job {
	out := make([]*triggers.Job, len(crs))
	for i, cr := range crs {
		out[i] = crconv.JobFromCR(cr, ns)
	}
	return out
}

// KeyOf returns the key of name in Kubernetes namespace k8sNS, with the
// API namespace of the store's namespace k8sNS (the key of a FunctionJob
// there, or of another object of the store's namespaces), and false when
// k8sNS is none of the store's.
func (s *Jobs) KeyOf(ctx context.Context, k8sNS, name string) (triggers.Key, bool, error) {
	return s.s.KeyOf(ctx, k8sNS, name)
}

// Create implements triggers.JobStore.
func (s *Jobs) Create(ctx context.Context, j *triggers.Job) (*triggers.Job, error) {
	cr := crconv.JobToCR(j)
	cr.Status = v1alpha1.FunctionJobStatus{}
	if err := s.s.Create(ctx, j.Key(), cr); err != nil {
		return nil, err
	}
	return crconv.JobFromCR(cr, j.Namespace), nil
}

// Get implements triggers.JobStore.
func (s *Jobs) Get(ctx context.Context, key triggers.Key) (*triggers.Job, error) {
	var cr v1alpha1.FunctionJob
	if err := s.s.Get(ctx, key, &cr); err != nil {
		return nil, err
	}
	return crconv.JobFromCR(&cr, key.Namespace), nil
}

// List implements triggers.JobStore; see kubestore.Page for its cost.
func (s *Jobs) List(ctx context.Context, namespace string, opts triggers.ListOptions) ([]*triggers.Job, bool, error) {
	crs, more, err := kubestore.Page[*v1alpha1.FunctionJob](ctx, s.s, &v1alpha1.FunctionJobList{}, namespace, opts)
	if err != nil {
		return nil, false, err
	}
	return jobsOf(crs, namespace), more, nil
}

// ByFunction implements triggers.JobStore.
func (s *Jobs) ByFunction(ctx context.Context, namespace, function string) ([]*triggers.Job, error) {
	crs, err := kubestore.List[*v1alpha1.FunctionJob](ctx, s.s, &v1alpha1.FunctionJobList{}, namespace,
		client.MatchingFields{functionField: function})
	if err != nil {
		return nil, err
	}
	return jobsOf(crs, namespace), nil
}

// Keys implements triggers.JobStore.
func (s *Jobs) Keys(ctx context.Context) ([]triggers.Key, error) {
	return s.s.Keys(ctx, v1alpha1.GroupVersion.WithKind("FunctionJobList"))
}

// UpdateSpec implements triggers.JobStore.
func (s *Jobs) UpdateSpec(ctx context.Context, key triggers.Key, spec triggers.JobSpec) (*triggers.Job, error) {
	var cr v1alpha1.FunctionJob
	if err := s.s.Replace(ctx, key, &cr, "/spec", crconv.JobSpecToCR(spec)); err != nil {
		return nil, err
	}
	return crconv.JobFromCR(&cr, key.Namespace), nil
}

// UpdateStatus implements triggers.JobStore.
func (s *Jobs) UpdateStatus(ctx context.Context, key triggers.Key, status triggers.JobStatus) error {
	return s.s.Replace(ctx, key, &v1alpha1.FunctionJob{}, "/status", crconv.JobStatusToCR(status))
}

// Delete implements triggers.JobStore.
func (s *Jobs) Delete(ctx context.Context, key triggers.Key) error {
	return s.s.Delete(ctx, key, &v1alpha1.FunctionJob{})
}
