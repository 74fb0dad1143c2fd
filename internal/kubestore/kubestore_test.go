package kubestore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.kube5s.ru/sless/api/v1alpha1"
	"sless.kube5s.ru/sless/internal/names"
	"sless.kube5s.ru/sless/internal/testenv/kubeenv"
	"sless.kube5s.ru/sless/modules/meta"
)

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m)) }

var (
	ctx         = context.Background()
	errNotFound = errors.New("not found")
	errExists   = errors.New("already exists")
)

// newStore returns a store of Functions in namespaces of t's own.
func newStore(t *testing.T) (*kubeenv.Env, *Store) {
	t.Helper()
	env := kubeenv.Start(t)
	kind := Kind{Name: "function", ErrNotFound: errNotFound, ErrAlreadyExists: errExists}
	return env, New(env.Client, kind, Options{NamespacePrefix: env.NamespacePrefix(t)})
}

func function(spec v1alpha1.FunctionSpec) *v1alpha1.Function {
	return &v1alpha1.Function{Spec: spec}
}

func mustCreate(t *testing.T, s *Store, key meta.Key) {
	t.Helper()
	if err := s.Create(ctx, key, function(v1alpha1.FunctionSpec{Runtime: "python3.11"})); err != nil {
		t.Fatalf("Create(%v): %v", key, err)
	}
}

// TestPage pages a namespace read in chunks of 3 and compares every page
// with the names sorted by byte order.
func TestPage(t *testing.T) {
	defer func(n int64) { chunkSize = n }(chunkSize)
	chunkSize = 3
	_, s := newStore(t)
	names := []string{"b", "a-b", "a0", "ab", "a", "z-9", "0", "9lives", "a--b", "zz", "m"}
	for _, n := range names {
		mustCreate(t, s, meta.Key{Namespace: "ns", Name: n})
	}
	mustCreate(t, s, meta.Key{Namespace: "other", Name: "a1"})
	sorted := slices.Sorted(slices.Values(names))
	for _, tc := range []struct {
		after string
		limit int
	}{
		{"", 1}, {"", 4}, {"", 11}, {"", 12}, {"", 0},
		{"a", 3}, {"a-", 2}, {"a0", 100}, {"m", 2}, {"zz", 5}, {"zzz", 5},
	} {
		t.Run(fmt.Sprintf("after %q limit %d", tc.after, tc.limit), func(t *testing.T) {
			page, more, err := Page[*v1alpha1.Function](ctx, s, &v1alpha1.FunctionList{}, "ns", meta.ListOptions{After: tc.after, Limit: tc.limit})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, fn := range page {
				got = append(got, fn.Name)
			}
			var want []string
			for _, n := range sorted {
				if n > tc.after {
					want = append(want, n)
				}
			}
			limit := tc.limit
			if limit == 0 {
				limit = 50 // validation.DefaultPageSize
			}
			wantMore := len(want) > limit
			want = want[:min(len(want), limit)]
			if diff := cmp.Diff(want, got); diff != "" || more != wantMore {
				t.Errorf("more %v (want %v), names (-want +got):\n%s", more, wantMore, diff)
			}
		})
	}
}

func TestCreateMakesTheNamespace(t *testing.T) {
	env, s := newStore(t)
	mustCreate(t, s, meta.Key{Namespace: "fresh", Name: "one"})
	mustCreate(t, s, meta.Key{Namespace: "fresh", Name: "two"})
	var ns corev1.Namespace
	if err := env.Client.Get(ctx, client.ObjectKey{Name: s.Namespace("fresh")}, &ns); err != nil {
		t.Fatalf("the namespace of the created functions: %v", err)
	}
	want := map[string]string{names.ManagedByLabel: names.ManagedBy, names.NamespaceLabel: "fresh", "kubernetes.io/metadata.name": ns.Name}
	if diff := cmp.Diff(want, ns.Labels); diff != "" || !strings.HasSuffix(ns.Name, names.Namespace("fresh")) {
		t.Errorf("namespace %s, labels (-want +got):\n%s", ns.Name, diff)
	}
}

// TestErrors checks that errors wrap the kind's sentinels and name the
// object by its API key, never by the Kubernetes namespace.
func TestErrors(t *testing.T) {
	_, s := newStore(t)
	key := meta.Key{Namespace: "team-a", Name: "f"}
	mustCreate(t, s, key)
	missing := meta.Key{Namespace: "team-a", Name: "missing"}
	for _, tc := range []struct {
		name string
		err  error
		want error
		key  meta.Key
	}{
		{"create existing", s.Create(ctx, key, function(v1alpha1.FunctionSpec{Runtime: "python3.11"})), errExists, key},
		{"get missing", s.Get(ctx, missing, &v1alpha1.Function{}), errNotFound, missing},
		{"get in a missing namespace", s.Get(ctx, meta.Key{Namespace: "nowhere", Name: "f"}, &v1alpha1.Function{}), errNotFound,
			meta.Key{Namespace: "nowhere", Name: "f"}},
		{"update missing", s.Update(ctx, missing, &v1alpha1.Function{}, func() {}), errNotFound, missing},
		{"replace missing", s.Replace(ctx, missing, &v1alpha1.Function{}, "/spec/codeSHA256", "ab"), errNotFound, missing},
		{"replace status of missing", s.Replace(ctx, missing, &v1alpha1.Function{}, "/status", v1alpha1.FunctionStatus{}), errNotFound, missing},
		{"delete missing", s.Delete(ctx, missing, &v1alpha1.Function{}), errNotFound, missing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !errors.Is(tc.err, tc.want) {
				t.Fatalf("got %v; want %v", tc.err, tc.want)
			}
			want := "function " + tc.key.String() + ": " + tc.want.Error()
			if tc.err.Error() != want {
				t.Errorf("message %q; want %q", tc.err, want)
			}
		})
	}
}

// TestUpdateRetriesConflicts checks that concurrent read-modify-writes all
// land.
func TestUpdateRetriesConflicts(t *testing.T) {
	_, s := newStore(t)
	key := meta.Key{Namespace: "ns", Name: "busy"}
	if err := s.Create(ctx, key, function(v1alpha1.FunctionSpec{Runtime: "python3.11", MemoryMB: 100})); err != nil {
		t.Fatal(err)
	}
	const n = 10
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			var fn v1alpha1.Function
			errs <- s.Update(ctx, key, &fn, func() { fn.Spec.MemoryMB++ })
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var fn v1alpha1.Function
	if err := s.Get(ctx, key, &fn); err != nil {
		t.Fatal(err)
	}
	if fn.Spec.MemoryMB != 100+n || fn.Generation != 1+n {
		t.Errorf("memory %d, generation %d after %d concurrent increments; want %d, %d", fn.Spec.MemoryMB, fn.Generation, n, 100+n, 1+n)
	}
}

// TestOnlyItsNamespaces checks that a store with a prefix sees only the
// namespaces with it, by their API namespaces.
func TestOnlyItsNamespaces(t *testing.T) {
	_, s := newStore(t)
	mustCreate(t, s, meta.Key{Namespace: "b", Name: "x"})
	mustCreate(t, s, meta.Key{Namespace: "a", Name: "y"})
	// An object of another store (another prefix) on the same server.
	_, other := newStore(t)
	mustCreate(t, other, meta.Key{Namespace: "a", Name: "z"})
	want := []meta.Key{{Namespace: "a", Name: "y"}, {Namespace: "b", Name: "x"}}
	if diff := cmp.Diff(want, keysOf(t, s)); diff != "" {
		t.Errorf("Keys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, allOf(t, s)); diff != "" {
		t.Errorf("All (-want +got):\n%s", diff)
	}
}

// TestLongNamespacesMapBack checks that an API namespace whose Kubernetes
// namespace is shortened with a hash is found again from the namespace's
// label. The store has no prefix, which would make the name too long.
func TestLongNamespacesMapBack(t *testing.T) {
	env := kubeenv.Start(t)
	s := New(env.Client, Kind{Name: "function", ErrNotFound: errNotFound, ErrAlreadyExists: errExists}, Options{})
	// Unique per run: the namespace of the previous run (-count) is still
	// being deleted, and takes no new object.
	long := fmt.Sprintf("%s%08x", strings.Repeat("l", 52), rand.Uint32())
	if names.Namespace(long) == "sless-fn-"+long {
		t.Fatalf("the Kubernetes namespace of %q is not shortened; the test needs one that is", long)
	}
	key := meta.Key{Namespace: long, Name: "f"}
	mustCreate(t, s, key)
	t.Cleanup(func() {
		s.Delete(ctx, key, &v1alpha1.Function{})
		env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.Namespace(long)}})
	})
	var got []meta.Key
	for _, k := range keysOf(t, s) {
		if k.Namespace == long {
			got = append(got, k)
		}
	}
	if diff := cmp.Diff([]meta.Key{key}, got); diff != "" {
		t.Errorf("Keys in %s (-want +got):\n%s", long, diff)
	}
}

func keysOf(t *testing.T, s *Store) []meta.Key {
	t.Helper()
	keys, err := s.Keys(ctx, v1alpha1.GroupVersion.WithKind("FunctionList"))
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func allOf(t *testing.T, s *Store) []meta.Key {
	t.Helper()
	items, err := All[*v1alpha1.Function](ctx, s, &v1alpha1.FunctionList{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []meta.Key
	for _, it := range items {
		keys = append(keys, meta.Key{Namespace: it.Namespace, Name: it.Object.Name})
	}
	return keys
}

// TestAPINamespace maps the Kubernetes namespaces of a store back to their
// API namespaces, and refuses those of another store and unknown ones.
func TestAPINamespace(t *testing.T) {
	_, s := newStore(t)
	_, other := newStore(t)
	mustCreate(t, s, meta.Key{Namespace: "a", Name: "x"})
	mustCreate(t, other, meta.Key{Namespace: "b", Name: "y"})
	for _, c := range []struct {
		k8sNS  string
		want   string
		wantOK bool
	}{
		{s.Namespace("a"), "a", true},
		{s.Namespace("a"), "a", true}, // from memory
		{other.Namespace("b"), "", false},
		{s.Namespace("never-made"), "", false},
		{"kube-system", "", false},
	} {
		got, ok, err := s.APINamespace(ctx, c.k8sNS)
		if err != nil || got != c.want || ok != c.wantOK {
			t.Errorf("APINamespace(%s): %q, %v, %v; want %q, %v", c.k8sNS, got, ok, err, c.want, c.wantOK)
		}
	}
}
