package app

import (
	"path/filepath"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/crane"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/python"
	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/storage/blobfs"
)

// TestClusterModeBuildsWithCrane starts and stops the cluster mode's
// builder from the image settings: crane, with its cache in the data
// directory.
func TestClusterModeBuildsWithCrane(t *testing.T) {
	cfg := testConfig(t, "--image-repository", "127.0.0.1:5000/sless/functions", "--image-base-images", "python3.11=127.0.0.1:5000/py:v1")
	ch := choose(cluster, cfg.Builder)
	if ch.builder != "crane" {
		t.Fatalf("the cluster mode builds with %q, want crane", ch.builder)
	}
	var b build.Builder
	app := fxtest.New(t, builderOptions(cfg, ch), fx.Supply(discard, fx.Annotate(build.Observers{}, fx.As(new(build.Observer)))),
		fx.Provide(func() (storage.Blobs, error) { return blobfs.New(t.TempDir()) }),
		fx.Provide(func() (*runtime.Registry, error) { return runtime.NewRegistry([]runtime.Provider{python.New()}) }),
		fx.Populate(&b))
	app.RequireStart().RequireStop()
	if _, ok := b.(*crane.Builder); !ok {
		t.Errorf("builder %T, want the crane builder", b)
	}
	if got := craneConfig(cfg); got.BaseImages["python3.11"] != "127.0.0.1:5000/py:v1" || got.CacheDir != filepath.Join(cfg.DataDir, "image-cache") {
		t.Errorf("crane config %+v: want the base image given and the cache in the data directory", got)
	}
}
