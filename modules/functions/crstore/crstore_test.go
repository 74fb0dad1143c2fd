package crstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.kube5s.ru/sless/api/v1alpha1"
	"sless.kube5s.ru/sless/internal/names"
	"sless.kube5s.ru/sless/internal/testenv/kubeenv"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/functions/crstore"
	"sless.kube5s.ru/sless/modules/functions/fnstoretest"
)

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m)) }

var ctx = context.Background()

// store is a store of namespaces of a test's own on the package's API
// server.
type store struct {
	*crstore.Store
	env    *kubeenv.Env
	prefix string
}

func newStore(t *testing.T, opts crstore.Options) *store {
	t.Helper()
	env := kubeenv.Start(t)
	opts.NamespacePrefix = env.NamespacePrefix(t)
	s, err := crstore.New(env.Client, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &store{Store: s, env: env, prefix: opts.NamespacePrefix}
}

// customResource reads the custom resource of key as kubectl would.
func (s *store) customResource(t *testing.T, key functions.Key) *v1alpha1.Function {
	t.Helper()
	var cr v1alpha1.Function
	if err := s.env.Client.Get(ctx, client.ObjectKey{Namespace: s.prefix + names.Namespace(key.Namespace), Name: key.Name}, &cr); err != nil {
		t.Fatal(err)
	}
	return &cr
}

func TestConformance(t *testing.T) {
	fnstoretest.Run(t, func(t *testing.T) functions.Store { return newStore(t, crstore.Options{}) })
}

func sample() functions.Spec {
	return functions.Spec{Runtime: "python3.11", Handler: "handler.handle", TimeoutSeconds: 30, MemoryMB: 256,
		MaxInstances: 10, Concurrency: 1, Egress: "all"}
}

func TestNewRefusesABadPublicURL(t *testing.T) {
	for _, u := range []string{"sless.example.com", "ftp://sless.example.com", "https://", "https://h/?q=1", "http://h/#f", "::"} {
		if _, err := crstore.New(nil, crstore.Options{PublicURL: u}); err == nil || !strings.Contains(err.Error(), "public URL") {
			t.Errorf("New with public URL %q: %v; want an error naming the public URL", u, err)
		}
	}
}

// TestStatusURL checks that a status write sets the function's /fn URL in
// the custom resource, which kubectl's URL column shows.
func TestStatusURL(t *testing.T) {
	for _, tc := range []struct{ publicURL, want string }{
		{"", ""},
		{"https://sless.example.com", "https://sless.example.com/fn/team-a/hello"},
		{"http://10.0.0.1:8080/base/", "http://10.0.0.1:8080/base/fn/team-a/hello"},
	} {
		t.Run(tc.publicURL, func(t *testing.T) {
			s := newStore(t, crstore.Options{PublicURL: tc.publicURL})
			fn, err := s.Create(ctx, &functions.Function{Namespace: "team-a", Name: "hello", Spec: sample()})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.UpdateStatus(ctx, fn.Key(), functions.Status{Phase: functions.PhaseReady, ObservedGeneration: 1}); err != nil {
				t.Fatal(err)
			}
			cr := s.customResource(t, fn.Key())
			if cr.Status.URL != tc.want || cr.Status.Phase != "Ready" {
				t.Errorf("status url %q, phase %q; want %q, Ready", cr.Status.URL, cr.Status.Phase, tc.want)
			}
		})
	}
}

// TestGenerationIsMetadataGeneration checks that a change of the custom
// resource by others (kubectl edit) shows in the function's generation,
// and that writing the same spec keeps it, as the API server does.
func TestGenerationIsMetadataGeneration(t *testing.T) {
	s := newStore(t, crstore.Options{})
	fn, err := s.Create(ctx, &functions.Function{Namespace: "default", Name: "f", Spec: sample()})
	if err != nil {
		t.Fatal(err)
	}
	cr := s.customResource(t, fn.Key())
	cr.Spec.MemoryMB = 1024
	if err := s.env.Client.Update(ctx, cr); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, fn.Key())
	if err != nil {
		t.Fatal(err)
	}
	if got.Generation != cr.Generation || got.Generation != 2 || got.MemoryMB != 1024 {
		t.Errorf("after an edit: generation %d (metadata.generation %d), memory %d; want 2, 2, 1024", got.Generation, cr.Generation, got.MemoryMB)
	}
	same, err := s.UpdateSpec(ctx, fn.Key(), got.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if same.Generation != 2 {
		t.Errorf("after writing the same spec: generation %d; want 2", same.Generation)
	}
}

// TestUpdateSpecKeepsConcurrentCode checks that spec updates, which
// rewrite the custom resource's spec, never undo an upload that lands in
// between: uploads run one after the other while spec updates keep running,
// and a watch of the object sees every version, whose code must never go
// back to an older upload.
func TestUpdateSpecKeepsConcurrentCode(t *testing.T) {
	s := newStore(t, crstore.Options{})
	fn, err := s.Create(ctx, &functions.Function{Namespace: "default", Name: "busy", Spec: sample()})
	if err != nil {
		t.Fatal(err)
	}
	wc, err := client.NewWithWatch(s.env.Config, client.Options{Scheme: s.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &v1alpha1.FunctionList{}, client.InNamespace(s.prefix+names.Namespace("default")))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	const uploads, writers = 20, 4
	var (
		wg      sync.WaitGroup
		done    = make(chan struct{})
		updates atomic.Int64
		errs    = make(chan error, writers+1)
	)
	for range writers {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				spec := sample()
				spec.MemoryMB = functions.MinMemoryMB + int(updates.Add(1)) // a new spec every time
				if _, err := s.UpdateSpec(ctx, fn.Key(), spec); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		defer close(done)
		for i := 1; i <= uploads; i++ {
			if _, err := s.SetCode(ctx, fn.Key(), fmt.Sprintf("%064x", i)); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Every write is one version; the watch sees them in order.
	want := 1 + uploads + updates.Load()
	timeout := time.After(time.Minute)
	var last, gen int64
	for gen < want {
		var ev watch.Event
		select {
		case ev = <-w.ResultChan():
		case <-timeout:
			t.Fatalf("timed out waiting for generation %d to be watched; the last was %d", want, gen)
		}
		cr, ok := ev.Object.(*v1alpha1.Function)
		if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
			t.Fatalf("watch event %s: %v", ev.Type, ev.Object)
		}
		upload := int64(0)
		if cr.Spec.CodeSHA256 != "" {
			if upload, err = strconv.ParseInt(cr.Spec.CodeSHA256, 16, 64); err != nil {
				t.Fatal(err)
			}
		}
		if upload < last {
			t.Fatalf("generation %d has the code of upload %d after generation %d had that of upload %d", cr.Generation, upload, gen, last)
		}
		last, gen = upload, cr.Generation
	}
	if gen != want || last != uploads {
		t.Errorf("the last version is generation %d with the code of upload %d; want %d and %d", gen, last, want, uploads)
	}
}
