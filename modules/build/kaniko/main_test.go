package kaniko

import (
	"os"
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
