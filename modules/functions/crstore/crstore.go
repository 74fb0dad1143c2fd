// Package crstore is the functions.Store of the cluster mode: functions are
// Function custom resources (api/v1alpha1) in the Kubernetes namespace of
// their API namespace (names.Namespace), read and written through the API
// server.
//
// The generation is the object's metadata.generation, which the API server
// increments when the spec changes (an update to the same spec keeps it).
// The status is the status subresource: spec and status writes never
// overwrite each other. How lists are paged is described at
// kubestore.Page.
package crstore

import (
	"context"
	"fmt"
	"net/url"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.kube5s.ru/sless/api/v1alpha1"
	"sless.kube5s.ru/sless/internal/crconv"
	"sless.kube5s.ru/sless/internal/kubestore"
	"sless.kube5s.ru/sless/modules/functions"
)

// Options configure a Store.
type Options struct {
	// NamespacePrefix is put before the Kubernetes namespace of an API
	// namespace; see kubestore.Options. Default none.
	NamespacePrefix string
	// PublicURL is the sless server's address as users reach it, such as
	// https://sless.example.com. With it, every status write also sets the
	// function's /fn URL (status.url, which `kubectl get functions`
	// shows). Default none: no URL.
	PublicURL string
}

// Store keeps functions as custom resources. It is safe for concurrent use.
type Store struct {
	s *kubestore.Store
	// publicURL is Options.PublicURL, parsed; nil for none.
	publicURL *url.URL
}

var _ functions.Store = (*Store)(nil)

// New returns a store over c, a client whose scheme has api/v1alpha1 and
// that reads from the API server rather than from a cache. A PublicURL
// that is not an http or https URL is an error.
func New(c client.Client, opts Options) (*Store, error) {
	kind := kubestore.Kind{Name: "function", ErrNotFound: functions.ErrNotFound, ErrAlreadyExists: functions.ErrAlreadyExists}
	s := &Store{s: kubestore.New(c, kind, kubestore.Options{NamespacePrefix: opts.NamespacePrefix})}
	if opts.PublicURL != "" {
		u, err := url.Parse(opts.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("the public URL %q is not an http:// or https:// address such as https://sless.example.com", opts.PublicURL)
		}
		s.publicURL = u
	}
	return s, nil
}

// KeyOf returns the key of name in Kubernetes namespace k8sNS, with the
// API namespace of the store's namespace k8sNS (the key of a Function
// there, or of another object of the store's namespaces), and false when
// k8sNS is none of the store's.
func (s *Store) KeyOf(ctx context.Context, k8sNS, name string) (functions.Key, bool, error) {
	return s.s.KeyOf(ctx, k8sNS, name)
}

// EnsureFinalizer adds finalizer name to the function of key unless it is
// being deleted, and reports whether it is; a missing function is not
// being deleted. See crdriver.Finalizing.
func (s *Store) EnsureFinalizer(ctx context.Context, key functions.Key, name string) (bool, error) {
	return s.s.EnsureFinalizer(ctx, key, &v1alpha1.Function{}, name)
}

// RemoveFinalizer removes finalizer name from the function of key; a
// missing function is not an error.
func (s *Store) RemoveFinalizer(ctx context.Context, key functions.Key, name string) error {
	return s.s.RemoveFinalizer(ctx, key, &v1alpha1.Function{}, name)
}

// Create implements functions.Store. A new function has no status until
// its reconciler writes one; until then it reads as Pending.
func (s *Store) Create(ctx context.Context, fn *functions.Function) (*functions.Function, error) {
	cr := crconv.FunctionToCR(fn)
	cr.Status = v1alpha1.FunctionStatus{}
	if err := s.s.Create(ctx, fn.Key(), cr); err != nil {
		return nil, err
	}
	return crconv.FunctionFromCR(cr, fn.Namespace), nil
}

// GetCR returns the Function custom resource of key, as stored.
func (s *Store) GetCR(ctx context.Context, key functions.Key) (*v1alpha1.Function, error) {
	var cr v1alpha1.Function
	if err := s.s.Get(ctx, key, &cr); err != nil {
		return nil, err
	}
	return &cr, nil
}

// Get implements functions.Store.
func (s *Store) Get(ctx context.Context, key functions.Key) (*functions.Function, error) {
	var cr v1alpha1.Function
	if err := s.s.Get(ctx, key, &cr); err != nil {
		return nil, err
	}
	return crconv.FunctionFromCR(&cr, key.Namespace), nil
}

// List implements functions.Store; see kubestore.Page for its cost.
func (s *Store) List(ctx context.Context, namespace string, opts functions.ListOptions) ([]*functions.Function, bool, error) {
	crs, more, err := kubestore.Page[*v1alpha1.Function](ctx, s.s, &v1alpha1.FunctionList{}, namespace, opts)
	if err != nil {
		return nil, false, err
	}
	out := make([]*functions.Function, len(crs))
	for i, cr := range crs {
		out[i] = crconv.FunctionFromCR(cr, namespace)
	}
	return out, more, nil
}

// Keys implements functions.Store.
func (s *Store) Keys(ctx context.Context) ([]functions.Key, error) {
	return s.s.Keys(ctx, v1alpha1.GroupVersion.WithKind("FunctionList"))
}

// UpdateSpec implements functions.Store. The code is part of the custom
// resource's spec, so the spec is read and written back with its
// resourceVersion, which keeps a concurrent SetCode.
func (s *Store) UpdateSpec(ctx context.Context, key functions.Key, spec functions.Spec) (*functions.Function, error) {
	var cr v1alpha1.Function
	err := s.s.Update(ctx, key, &cr, func() { cr.Spec = crconv.FunctionSpecToCR(spec, cr.Spec.CodeSHA256) })
	if err != nil {
		return nil, err
	}
	return crconv.FunctionFromCR(&cr, key.Namespace), nil
}

// SetCode implements functions.Store.
func (s *Store) SetCode(ctx context.Context, key functions.Key, codeSHA256 string) (*functions.Function, error) {
	var cr v1alpha1.Function
	if err := s.s.Replace(ctx, key, &cr, "/spec/codeSHA256", codeSHA256); err != nil {
		return nil, err
	}
	return crconv.FunctionFromCR(&cr, key.Namespace), nil
}

// UpdateStatus implements functions.Store.
func (s *Store) UpdateStatus(ctx context.Context, key functions.Key, status functions.Status) error {
	st := crconv.FunctionStatusToCR(status)
	if s.publicURL != nil {
		st.URL = s.publicURL.JoinPath("fn", key.Namespace, key.Name).String()
	}
	return s.s.Replace(ctx, key, &v1alpha1.Function{}, "/status", st)
}

// Delete implements functions.Store.
func (s *Store) Delete(ctx context.Context, key functions.Key) error {
	return s.s.Delete(ctx, key, &v1alpha1.Function{})
}
