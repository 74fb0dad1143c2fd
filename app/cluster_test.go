//go:build cluster

package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"sless.kube5s.ru/sless/internal/testenv/kubeenv"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/kaniko"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/python"
	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/storage/blobfs"
)

// TestClusterModeBuildsWithKaniko starts and stops the kaniko builder of
// the cluster mode from its settings, the image settings it shares with
// crane, and the S3 blob store its build contexts go to; it contacts
// neither the API server of the kubeconfig nor S3 until it builds.
func TestClusterModeBuildsWithKaniko(t *testing.T) {
	writeKubeconfig(t)
	cfg := testConfig(t, "--builder", "kaniko", "--image-repository", "registry.example.com/sless/functions",
		"--blob-url", "s3://code?endpoint=127.0.0.1:1&insecure=true", "--kaniko-namespace", "builds",
		"--kaniko-registry-secret", "push", "--build-timeout", "20m")
	var b build.Builder
	app := fxtest.New(t, builderOptions(cfg, choose(cluster, cfg.Builder)), fx.Supply(discard),
		fx.Provide(func() (storage.Blobs, error) { return blobfs.New(t.TempDir()) }),
		fx.Provide(func() (*runtime.Registry, error) { return runtime.NewRegistry([]runtime.Provider{python.New()}) }),
		fx.Populate(&b))
	app.RequireStart().RequireStop()
	if _, ok := b.(*kaniko.Builder); !ok {
		t.Errorf("builder %T, want the kaniko builder", b)
	}
	got := kanikoConfig(cfg)
	want := kaniko.Config{Namespace: "builds", Repository: "registry.example.com/sless/functions", BaseImages: map[string]string{},
		Image: kaniko.DefaultImage, FetchImage: kaniko.DefaultFetchImage, RegistrySecret: "push", Platform: "linux/amd64",
		CPU: kaniko.DefaultCPU, Memory: kaniko.DefaultMemory, Limits: cfg.BuildLimits, Timeout: 20 * time.Minute,
		TempDir: filepath.Join(cfg.DataDir, "tmp")}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(kaniko.Config{})); diff != "" {
		t.Errorf("kaniko config (-want +got):\n%s", diff)
	}
}

// TestKanikoNeedsS3: the build pods download the code from S3, so a blob
// store of files stops the kaniko builder at start, saying so.
func TestKanikoNeedsS3(t *testing.T) {
	writeKubeconfig(t)
	cfg := testConfig(t, "--builder", "kaniko", "--image-repository", "registry.example.com/sless/functions")
	var b build.Builder
	err := fx.New(builderOptions(cfg, choose(cluster, cfg.Builder)), fx.Supply(discard), fx.NopLogger,
		fx.Provide(func() (storage.Blobs, error) { return blobfs.New(t.TempDir()) }),
		fx.Provide(func() (*runtime.Registry, error) { return runtime.NewRegistry([]runtime.Provider{python.New()}) }),
		fx.Populate(&b)).Err()
	if want := "the kaniko builder needs an s3:// blob URL (--blob-url)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want an error with %q", err, want)
	}
}

// TestClusterGraph validates the fx graph of the kubernetes mode without
// running any constructor: every module finds what it needs in either
// mode, and the contracts the mode implements differently are its own.
func TestClusterGraph(t *testing.T) {
	cfg := testConfig(t, kubernetesArgs...)
	if err := fx.ValidateApp(Options(cfg, cfg.APIToken, discard)); err != nil {
		t.Fatal(err)
	}
}

// TestLeaderElectionNeedsANamespaceOutsideAPod: the Lease's namespace
// defaults to the pod's; outside a pod the refusal says which setting to
// give, and without leader election none is needed.
func TestLeaderElectionNeedsANamespaceOutsideAPod(t *testing.T) {
	env := kubeenv.Start(t)
	api := &kubeAPI{config: env.Config, scheme: env.Scheme, client: env.Client}
	_, err := newManager(testConfig(t, kubernetesArgs...), api, discard)
	if want := "set --leader-election-namespace, or --leader-elect=false"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("leader election outside a pod: %v; want an error with %q", err, want)
	}
	for _, args := range [][]string{{"--leader-election-namespace", "sless"}, {"--leader-elect=false"}} {
		if _, err := newManager(testConfig(t, append(args, kubernetesArgs...)...), api, discard); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// writeKubeconfig points KUBECONFIG at an API server that is not there.
func writeKubeconfig(t *testing.T) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)
}
