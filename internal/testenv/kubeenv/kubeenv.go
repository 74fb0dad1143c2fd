// Package kubeenv gives the tests of a package a real Kubernetes API server
// (kube-apiserver and etcd, through controller-runtime's envtest) with
// sless's CRDs installed, and a client for it.
//
// Starting one costs seconds, so a package shares one: its TestMain runs
// the tests through Main, and each test that needs the server calls Start,
// which starts it on the first call and gives every caller the same one.
// Tests keep apart by the namespaces they use. Main stops the server after
// the tests; on Linux the server also dies with the test binary when that
// ends without stopping it (a panic, a timeout).
//
// The binaries are the ones `hack/tools.sh envtest` builds (KUBEBUILDER_ASSETS
// names another directory of them); with SLESS_REQUIRE_SERVICES=1 the first
// Start builds them when they are missing. When they are missing, or the
// server does not start, Start ends the test with testenv.Unavailable: a
// skip, or a failure with SLESS_REQUIRE_SERVICES=1.
//
// It is a package of its own, apart from testenv, so that only the tests
// that use an API server link the Kubernetes libraries.
package kubeenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"sless.kube5s.ru/sless/api/v1alpha1"
	"sless.kube5s.ru/sless/internal/testenv"
)

// CRDDir is the directory of the CRDs, relative to the repository root.
const CRDDir = "deploy/base/crds"

// Env is a running API server with sless's CRDs.
type Env struct {
	// Config reaches the server as its administrator.
	Config *rest.Config
	// Scheme has client-go's types and api/v1alpha1.
	Scheme *k8sruntime.Scheme
	// Client reads from and writes to the server directly (no cache).
	Client client.Client
}

// shared is the server of the test binary.
var shared struct {
	mu      sync.Mutex
	inMain  bool
	started bool
	env     *Env
	srv     *server
	err     error
}

// Main runs the tests of m and then stops the API server if a test started
// one; it returns the exit code for os.Exit:
//
//	func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m)) }
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		if err := shared.srv.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "kubeenv: stopping the API server: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		shared.srv = nil
	}
	return code
}

// Start returns the package's API server, starting it on the first call,
// or ends t as testenv.Unavailable when it cannot start. The package's
// TestMain must run the tests through Main, which stops the server.
func Start(t testing.TB) *Env {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		t.Fatal("kubeenv.Start: the package's TestMain must run its tests with kubeenv.Main, which stops the API server")
	}
	if !shared.started {
		shared.started = true
		shared.env, shared.srv, shared.err = start(testenv.Required(t))
	}
	if shared.err != nil {
		testenv.Unavailable(t, "Kubernetes API server: %v", shared.err)
	}
	return shared.env
}

// start finds the binaries and the CRDs and starts the server. With build,
// missing binaries are built first (minutes, once per machine), as
// SLESS_REQUIRE_SERVICES asks.
func start(build bool) (_ *Env, _ *server, err error) {
	root, err := testenv.FindRepoRoot()
	if err != nil {
		return nil, nil, err
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		if assets, err = testenv.Tool(root, "envtest", build); err != nil {
			return nil, nil, fmt.Errorf("kube-apiserver and etcd: %w", err)
		}
	}
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	// envtest logs its retries through controller-runtime's logger; the
	// error it returns says what failed.
	ctrllog.SetLogger(logr.Discard())
	wrappers, err := os.MkdirTemp("", "kubeenv-")
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(wrappers)
		}
	}()
	useExisting := false
	env := &envtest.Environment{
		Scheme:                   scheme,
		CRDDirectoryPaths:        []string{filepath.Join(root, CRDDir)},
		ErrorIfCRDPathMissing:    true,
		UseExistingCluster:       &useExisting,
		ControlPlaneStartTimeout: time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	apiServer := env.ControlPlane.GetAPIServer()
	if apiServer.Path, err = dieWithParent(wrappers, assets, "kube-apiserver"); err != nil {
		return nil, nil, err
	}
	env.ControlPlane.Etcd = &envtest.Etcd{}
	if env.ControlPlane.Etcd.Path, err = dieWithParent(wrappers, assets, "etcd"); err != nil {
		return nil, nil, err
	}
	srv := &server{env: env, wrappers: wrappers, stopReq: make(chan struct{}), stopped: make(chan error, 1)}
	cfg, err := srv.start()
	if err != nil {
		return nil, nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		srv.stop()
		return nil, nil, fmt.Errorf("making a client of the API server: %w", err)
	}
	return &Env{Config: cfg, Scheme: scheme, Client: c}, srv, nil
}

// dieWithParent returns the path of a script in dir that runs the binary
// name of assets with the parent-death signal SIGTERM, so that it ends with
// the test binary's thread that starts it (see server.start), or the
// binary itself where setpriv is missing.
func dieWithParent(dir, assets, name string) (string, error) {
	bin := filepath.Join(assets, name)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	setpriv, err := exec.LookPath("setpriv")
	if runtime.GOOS != "linux" || err != nil {
		return bin, nil
	}
	script := filepath.Join(dir, name)
	body := fmt.Sprintf("#!/bin/sh\nexec %q --pdeathsig TERM -- %q \"$@\"\n", setpriv, bin)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		return "", err
	}
	return script, nil
}

// server runs envtest on one locked OS thread, which lives as long as the
// server: the kernel sends the parent-death signal when the thread that
// started a process ends, so it must not end before the server stops.
type server struct {
	env      *envtest.Environment
	wrappers string
	stopReq  chan struct{}
	stopped  chan error
}

func (s *server) start() (*rest.Config, error) {
	type result struct {
		cfg *rest.Config
		err error
	}
	started := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		cfg, err := s.env.Start()
		started <- result{cfg, err}
		if err != nil {
			return
		}
		<-s.stopReq
		s.stopped <- s.env.Stop()
	}()
	r := <-started
	return r.cfg, r.err
}

// stop stops the server and waits until it has.
func (s *server) stop() error {
	close(s.stopReq)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer os.RemoveAll(s.wrappers)
	select {
	case err := <-s.stopped:
		return err
	case <-ctx.Done():
		return errors.New("the API server did not stop within a minute")
	}
}

// NamespacePrefix returns a prefix of Kubernetes namespaces of t's own, for
// a store's NamespacePrefix, so that tests share the server without
// sharing objects. When t ends, the sless objects in the namespaces with the
// prefix are deleted, and the namespaces too (the server of the tests has
// no namespace controller, so they stay in Terminating).
func (e *Env) NamespacePrefix(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b) // never fails (crypto/rand since Go 1.24)
	prefix := "t" + hex.EncodeToString(b) + "-"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var nss corev1.NamespaceList
		if err := e.Client.List(ctx, &nss); err != nil {
			t.Errorf("listing the namespaces to clean up: %v", err)
			return
		}
		for _, ns := range nss.Items {
			if !strings.HasPrefix(ns.Name, prefix) {
				continue
			}
			for _, obj := range []client.Object{&v1alpha1.Function{}, &v1alpha1.Trigger{}, &v1alpha1.FunctionJob{}} {
				if err := e.Client.DeleteAllOf(ctx, obj, client.InNamespace(ns.Name)); err != nil {
					t.Errorf("deleting the objects of namespace %s: %v", ns.Name, err)
				}
			}
			if err := e.Client.Delete(ctx, &ns); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting namespace %s: %v", ns.Name, err)
			}
		}
	})
	return prefix
}
