package kaniko

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"sless.kube5s.ru/sless/internal/testenv"
)

// apiServer is the kube-apiserver and etcd of envtest that the tests of
// this package share, started by the first test that needs it (so that the
// tests of the pure functions pay nothing) and stopped by TestMain.
var apiServer struct {
	once sync.Once
	env  *envtest.Environment
	cfg  *rest.Config
	// unavailable says why there is none.
	unavailable string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if apiServer.env != nil {
		if err := apiServer.env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}
	os.Exit(code)
}

// cluster returns a client of the shared API server, or ends t as
// testenv.Unavailable when there is none: the binaries of
// `hack/tools.sh envtest` are used when they are built, and built first
// (for minutes, once per machine) when SLESS_REQUIRE_SERVICES is set.
func cluster(t *testing.T) client.Client {
	t.Helper()
	required := testenv.Required(t)
	apiServer.once.Do(func() {
		assets, err := envtestAssets(testenv.RepoRoot(t), required)
		if err != nil {
			apiServer.unavailable = err.Error()
			return
		}
		env := &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlaneStartTimeout: time.Minute}
		cfg, err := env.Start()
		if err != nil {
			apiServer.unavailable = fmt.Sprintf("starting kube-apiserver and etcd of %s: %v", assets, err)
			return
		}
		apiServer.env, apiServer.cfg = env, cfg
	})
	if apiServer.cfg == nil {
		testenv.Unavailable(t, "no Kubernetes API server: %s", apiServer.unavailable)
	}
	c, err := client.New(apiServer.cfg, client.Options{})
	if err != nil {
		t.Fatalf("client of the API server: %v", err)
	}
	return c
}

// errNotBuilt: hack/tools.sh --cached found no envtest binaries.
var errNotBuilt = errors.New("kube-apiserver and etcd are not built; run hack/tools.sh envtest")

// envtestAssets returns the directory of kube-apiserver and etcd as
// hack/tools.sh prints it, building them first when build is set.
func envtestAssets(root string, build bool) (string, error) {
	args := []string{"--cached", "envtest"}
	if build {
		args = args[1:]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "tools.sh"), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() == 3:
		return "", errNotBuilt
	case err != nil:
		return "", fmt.Errorf("hack/tools.sh %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
