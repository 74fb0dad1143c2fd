// Package kubestore is what the stores of custom resources
// (modules/functions/crstore, modules/triggers/crstore) share, whatever
// the kind: where an API namespace's objects live (its Kubernetes
// namespace, names.Namespace, created on first use and labelled
// names.NamespaceLabel with the API namespace, which maps it back), writes
// of the spec and of the status that never overwrite each other, the
// contract's sentinel errors, and lists read in chunks and paged by name.
//
// Writes of the spec and of the status go through different endpoints (the
// status is a subresource), so neither can change the other; a write that
// replaces a whole spec or status is one JSON patch, applied atomically by
// the API server without a resourceVersion, so concurrent writers never
// conflict; a write that changes part of a spec reads the object and
// updates it with its resourceVersion, retrying on a conflict.
package kubestore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"sless.kube5s.ru/sless/internal/names"
	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/meta"
)

// chunkSize is the most objects one list request reads, so that a large
// namespace is never one huge response. A variable for the tests.
var chunkSize int64 = 250

// conflictBackoff paces the retries of an update that lost a race with
// another write: 35 tries, 5 ms apart at first and 1.2 times longer each
// time (up to 2.4 s), about 15 seconds in all. Ten tries within two
// seconds ran out when four writers raced for one object on a machine at
// load average 20, and a user's write then failed with a conflict it
// cannot act on. No Cap: wait.Backoff ends the retries once a step would
// exceed its Cap.
var conflictBackoff = wait.Backoff{Steps: 35, Duration: 5 * time.Millisecond, Factor: 1.2, Jitter: 0.5}

// Options configure a store of custom resources.
type Options struct {
	// NamespacePrefix is put before the Kubernetes namespace of an API
	// namespace (names.Namespace); namespaces without it are not the
	// store's. Default none. Tests set it so that stores share one API
	// server without sharing objects.
	NamespacePrefix string
}

// Kind names the objects of one kind in errors and gives the sentinels of
// its contract.
type Kind struct {
	// Name is the REST API's word for one object, such as "function".
	Name string
	// ErrNotFound and ErrAlreadyExists are the contract's sentinels, which
	// the store's errors wrap.
	ErrNotFound, ErrAlreadyExists error
}

// Store reads and writes the custom resources of one kind. It is safe for
// concurrent use; every method is one or a few requests to the API server
// (lists one per chunkSize objects).
type Store struct {
	c      client.Client
	kind   Kind
	prefix string
	// apiNS memoizes APINamespace: a Kubernetes namespace's API namespace
	// never changes (names.Namespace is deterministic).
	apiNS sync.Map // string -> string
}

// New returns a store of the objects of kind over c, which should read from
// the API server rather than from a cache, so that a write is seen by the
// next read.
func New(c client.Client, kind Kind, opts Options) *Store {
	return &Store{c: c, kind: kind, prefix: opts.NamespacePrefix}
}

// Namespace returns the Kubernetes namespace of API namespace ns.
func (s *Store) Namespace(ns string) string { return s.prefix + names.Namespace(ns) }

// apiNamespaces returns the API namespaces of the store's Kubernetes
// namespaces, by Kubernetes namespace. They come from the namespaces'
// names.NamespaceLabel, not from their names, which are shortened with a
// hash when long. Reading them costs one list of namespaces' metadata.
func (s *Store) apiNamespaces(ctx context.Context) (map[string]string, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	out := map[string]string{}
	err := s.each(ctx, list, func(o client.Object) {
		if ns := o.GetLabels()[names.NamespaceLabel]; ns != "" && o.GetName() == s.Namespace(ns) {
			out[o.GetName()] = ns
		}
	}, client.HasLabels{names.NamespaceLabel})
	if err != nil {
		return nil, fmt.Errorf("listing the namespaces of %ss: %w", s.kind.Name, err)
	}
	return out, nil
}

// APINamespace returns the API namespace whose objects the store keeps in
// Kubernetes namespace k8sNS, and false when k8sNS is none of the store's
// (it lacks names.NamespaceLabel, or has another prefix). It reads the
// namespace's metadata once; later calls answer from memory.
func (s *Store) APINamespace(ctx context.Context, k8sNS string) (string, bool, error) {
	if v, ok := s.apiNS.Load(k8sNS); ok {
		ns := v.(string)
		return ns, ns != "", nil
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	err := s.c.Get(ctx, types.NamespacedName{Name: k8sNS}, m)
	if apierrors.IsNotFound(err) {
		return "", false, nil // not memoized: it may be created yet
	}
	if err != nil {
		return "", false, fmt.Errorf("reading namespace %s: %w", k8sNS, err)
	}
	ns := m.GetLabels()[names.NamespaceLabel]
	if ns != "" && s.Namespace(ns) != k8sNS {
		ns = ""
	}
	s.apiNS.Store(k8sNS, ns)
	return ns, ns != "", nil
}

// KeyOf returns the key of name in Kubernetes namespace k8sNS: its API
// namespace and name, and false when k8sNS is none of the store's (see
// APINamespace).
func (s *Store) KeyOf(ctx context.Context, k8sNS, name string) (meta.Key, bool, error) {
	ns, ok, err := s.APINamespace(ctx, k8sNS)
	if !ok || err != nil {
		return meta.Key{}, false, err
	}
	return meta.Key{Namespace: ns, Name: name}, true, nil
}

// object sets the name and namespace of obj to those of key.
func (s *Store) object(key meta.Key, obj client.Object) client.Object {
	obj.SetName(key.Name)
	obj.SetNamespace(s.Namespace(key.Namespace))
	return obj
}

// err returns err in the contract's terms: its sentinels for a missing or
// existing object, else err wrapped with what was being done.
func (s *Store) err(err error, doing string, key meta.Key) error {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s %s: %w", s.kind.Name, key, s.kind.ErrNotFound)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%s %s: %w", s.kind.Name, key, s.kind.ErrAlreadyExists)
	}
	return fmt.Errorf("%s %s %s: %w", doing, s.kind.Name, key, err)
}

// Create creates obj as the object of key, creating its namespace first
// when it is missing; obj then holds the object as stored.
func (s *Store) Create(ctx context.Context, key meta.Key, obj client.Object) error {
	s.object(key, obj)
	err := s.c.Create(ctx, obj, client.FieldOwner(names.FieldManager))
	if isNamespaceMissing(err) {
		if err := s.createNamespace(ctx, key.Namespace); err != nil {
			return fmt.Errorf("creating %s %s: %w", s.kind.Name, key, err)
		}
		err = s.c.Create(ctx, obj, client.FieldOwner(names.FieldManager))
	}
	if err != nil {
		return s.err(err, "creating", key)
	}
	return nil
}

// isNamespaceMissing reports whether err is the API server's refusal to
// create an object in a namespace that does not exist.
func isNamespaceMissing(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Kind == "namespaces"
}

// createNamespace creates the Kubernetes namespace of API namespace apiNS.
// The Deployer of the cluster mode applies the rest of what it needs (its
// Pod Security labels) before it runs anything there.
func (s *Store) createNamespace(ctx context.Context, apiNS string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.Namespace(apiNS),
		Labels: map[string]string{names.ManagedByLabel: names.ManagedBy, names.NamespaceLabel: apiNS}}}
	err := s.c.Create(ctx, ns, client.FieldOwner(names.FieldManager))
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", s.Namespace(apiNS), err)
	}
	return nil
}

// Get reads the object of key into obj.
func (s *Store) Get(ctx context.Context, key meta.Key, obj client.Object) error {
	if err := s.c.Get(ctx, types.NamespacedName{Namespace: s.Namespace(key.Namespace), Name: key.Name}, obj); err != nil {
		return s.err(err, "reading", key)
	}
	return nil
}

// Update reads the object of key into obj, calls change and writes obj back
// with the resourceVersion read, again from the read when another write
// came in between; obj then holds the object as stored.
func (s *Store) Update(ctx context.Context, key meta.Key, obj client.Object, change func()) error {
	name := types.NamespacedName{Namespace: s.Namespace(key.Namespace), Name: key.Name}
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		if err := s.c.Get(ctx, name, obj); err != nil {
			return err
		}
		change()
		return s.c.Update(ctx, obj, client.FieldOwner(names.FieldManager))
	})
	if err != nil {
		return s.err(err, "updating", key)
	}
	return nil
}

// Replace sets the field at path (a JSON pointer such as "/spec") of the
// object of key to value, in one JSON patch; obj then holds the object as
// stored. A path under /status changes the status subresource.
func (s *Store) Replace(ctx context.Context, key meta.Key, obj client.Object, path string, value any) error {
	patch, err := json.Marshal([]jsonPatchOp{{Op: "add", Path: path, Value: value}})
	if err != nil {
		return fmt.Errorf("encoding %s of %s %s: %w", path, s.kind.Name, key, err)
	}
	s.object(key, obj)
	raw := client.RawPatch(types.JSONPatchType, patch)
	if path == "/status" || strings.HasPrefix(path, "/status/") {
		err = s.c.Status().Patch(ctx, obj, raw, client.FieldOwner(names.FieldManager))
	} else {
		err = s.c.Patch(ctx, obj, raw, client.FieldOwner(names.FieldManager))
	}
	if err != nil {
		return s.err(err, "writing "+strings.TrimPrefix(path, "/")+" of", key)
	}
	return nil
}

// EnsureFinalizer adds finalizer name to the object of key, read into obj,
// unless it is being deleted, and reports whether it is. A missing object
// is not being deleted: it is gone (nil error).
func (s *Store) EnsureFinalizer(ctx context.Context, key meta.Key, obj client.Object, name string) (deleting bool, err error) {
	err = s.Get(ctx, key, obj)
	switch {
	case errors.Is(err, s.kind.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	case obj.GetDeletionTimestamp() != nil:
		return true, nil
	case controllerutil.ContainsFinalizer(obj, name):
		return false, nil
	}
	err = s.Update(ctx, key, obj, func() {
		// The API server refuses a new finalizer on an object being
		// deleted.
		if obj.GetDeletionTimestamp() == nil {
			controllerutil.AddFinalizer(obj, name)
		}
	})
	if errors.Is(err, s.kind.ErrNotFound) {
		return false, nil
	}
	return obj.GetDeletionTimestamp() != nil, err
}

// RemoveFinalizer removes finalizer name from the object of key, read into
// obj; a missing object is not an error.
func (s *Store) RemoveFinalizer(ctx context.Context, key meta.Key, obj client.Object, name string) error {
	err := s.Update(ctx, key, obj, func() { controllerutil.RemoveFinalizer(obj, name) })
	if errors.Is(err, s.kind.ErrNotFound) {
		return nil
	}
	return err
}

// jsonPatchOp is one operation of a JSON patch (RFC 6902); "add" replaces
// a member that exists.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// Delete deletes the object of key; obj is of its type.
func (s *Store) Delete(ctx context.Context, key meta.Key, obj client.Object) error {
	if err := s.c.Delete(ctx, s.object(key, obj)); err != nil {
		return s.err(err, "deleting", key)
	}
	return nil
}

// each calls fn for every object that list with opts finds, reading them
// chunkSize at a time into list. fn must copy an object it keeps: the next
// chunk is read into the same list.
func (s *Store) each(ctx context.Context, list client.ObjectList, fn func(client.Object), opts ...client.ListOption) error {
	opts = append(opts, client.Limit(chunkSize))
	cont := ""
	for {
		if err := s.c.List(ctx, list, append(opts, client.Continue(cont))...); err != nil {
			return err
		}
		err := apimeta.EachListItem(list, func(o runtime.Object) error {
			fn(o.(client.Object))
			return nil
		})
		if err != nil {
			return err
		}
		if cont = list.GetContinue(); cont == "" {
			return nil
		}
	}
}

// Page returns the objects of API namespace ns whose names come after
// opts.After, ordered by name, at most validation.PageSize(opts.Limit) of
// them, and whether more follow. list is a list of the store's kind.
//
// Kubernetes lists have no "names after" filter, no order in their
// contract, and continue tokens that expire, so the page is made here: the
// namespace is read in chunks and the limit+1 smallest names after
// opts.After are kept. A page costs a read of the namespace's objects and
// memory for one page.
func Page[O client.Object](ctx context.Context, s *Store, list client.ObjectList, ns string, opts meta.ListOptions) ([]O, bool, error) {
	limit := validation.PageSize(opts.Limit)
	var page []O
	err := s.each(ctx, list, func(o client.Object) {
		name := o.GetName()
		if name <= opts.After {
			return
		}
		i, _ := slices.BinarySearchFunc(page, name, func(p O, name string) int { return strings.Compare(p.GetName(), name) })
		if i > limit {
			return
		}
		page = slices.Insert(page, i, o.DeepCopyObject().(O))
		if len(page) > limit+1 {
			page = page[:limit+1]
		}
	}, client.InNamespace(s.Namespace(ns)))
	if err != nil {
		return nil, false, fmt.Errorf("listing %ss in %s: %w", s.kind.Name, ns, err)
	}
	if len(page) > limit {
		return page[:limit], true, nil
	}
	return page, false, nil
}

// List returns the objects that list with opts finds in API namespace ns,
// ordered by name.
func List[O client.Object](ctx context.Context, s *Store, list client.ObjectList, ns string, opts ...client.ListOption) ([]O, error) {
	var out []O
	err := s.each(ctx, list, func(o client.Object) { out = append(out, o.DeepCopyObject().(O)) },
		append(opts, client.InNamespace(s.Namespace(ns)))...)
	if err != nil {
		return nil, fmt.Errorf("listing %ss in %s: %w", s.kind.Name, ns, err)
	}
	slices.SortFunc(out, func(a, b O) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

// Item is an object and its API namespace.
type Item[O client.Object] struct {
	Namespace string
	Object    O
}

// All returns the objects of list's kind in every namespace of the store,
// ordered by API namespace and name.
func All[O client.Object](ctx context.Context, s *Store, list client.ObjectList) ([]Item[O], error) {
	nss, err := s.apiNamespaces(ctx)
	if err != nil {
		return nil, err
	}
	var out []Item[O]
	err = s.each(ctx, list, func(o client.Object) {
		if ns, ok := nss[o.GetNamespace()]; ok {
			out = append(out, Item[O]{Namespace: ns, Object: o.DeepCopyObject().(O)})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("listing %ss: %w", s.kind.Name, err)
	}
	slices.SortFunc(out, func(a, b Item[O]) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Object.GetName(), b.Object.GetName()))
	})
	return out, nil
}

// Keys returns the keys of every object of list kind listKind (such as
// FunctionList) in the store's namespaces, ordered, reading their metadata
// only.
func (s *Store) Keys(ctx context.Context, listKind schema.GroupVersionKind) ([]meta.Key, error) {
	nss, err := s.apiNamespaces(ctx)
	if err != nil {
		return nil, err
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(listKind)
	var keys []meta.Key
	err = s.each(ctx, list, func(o client.Object) {
		if ns, ok := nss[o.GetNamespace()]; ok {
			keys = append(keys, meta.Key{Namespace: ns, Name: o.GetName()})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s keys: %w", s.kind.Name, err)
	}
	slices.SortFunc(keys, func(a, b meta.Key) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return keys, nil
}
