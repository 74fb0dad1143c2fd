package kube_test

import (
	"crypto/rand"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.kube5s.ru/sless/internal/testenv/kubeenv"
)

// The tests of this package share the API server of kubeenv, started by the
// first test that needs it (so that the tests of the pure functions pay
// nothing) and stopped after the tests.
func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m)) }

// cluster returns a client of the shared API server, or ends t as
// testenv.Unavailable when there is none (see kubeenv.Start).
func cluster(t *testing.T) client.Client {
	t.Helper()
	return kubeenv.Start(t).Client
}

// newNamespace returns an API namespace no other test uses. Namespaces are
// never removed: without a namespace controller they would stay
// terminating anyway.
func newNamespace() string { return "t-" + strings.ToLower(rand.Text()[:12]) }
