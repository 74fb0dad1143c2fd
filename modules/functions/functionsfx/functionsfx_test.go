package functionsfx_test

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/local"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/functions/functionsfx"
	"sless.kube5s.ru/sless/modules/runtime"
	runlocal "sless.kube5s.ru/sless/modules/runtime/local"
	"sless.kube5s.ru/sless/modules/runtime/runtimefx"
	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/storage/blobfs"
	"sless.kube5s.ru/sless/modules/storage/storagefx"
)

// notSuspended stands in for the triggers module, which decides suspension.
type notSuspended struct{}

func (notSuspended) Suspended(context.Context, functions.Key) (bool, error) { return false, nil }

// TestModuleReconcilesChanges wires the functions module, its SQL store and
// work-queue driver with the modules and local implementations they need,
// and checks that a change told to the notifier is built to Ready, and
// that the artifact of replaced code is removed after the grace period.
func TestModuleReconcilesChanges(t *testing.T) {
	dir := t.TempDir()
	blobs, err := blobfs.New(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	var (
		store    functions.Store
		notifier functions.ChangeNotifier
	)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	app := fxtest.New(t,
		storagefx.Module, runtimefx.Module, functionsfx.Module, functionsfx.SQLStore, functionsfx.WorkQueue,
		fx.Supply(
			log,
			prometheus.NewRegistry(),
			storagefx.Config{DatabaseURL: "sqlite:" + filepath.Join(dir, "db")},
			functionsfx.Config{UploadLimits: safezip.DefaultLimits(), UploadDir: dir, Workers: 2,
				ArtifactGrace: 100 * time.Millisecond},
			fx.Annotate(blobs, fx.As(new(storage.Blobs))),
		),
		fx.Provide(
			func() functions.Suspension { return notSuspended{} },
			func(lc fx.Lifecycle, reg *runtime.Registry) (build.Builder, error) {
				b, err := local.New(local.Config{Dir: filepath.Join(dir, "artifacts"), Limits: safezip.DefaultLimits()}, blobs, reg, nil, log)
				if err == nil {
					lc.Append(fx.Hook{OnStart: b.Start, OnStop: b.Stop})
				}
				return b, err
			},
			func(lc fx.Lifecycle, reg *runtime.Registry) runtime.Deployer {
				e := runlocal.New(runlocal.Config{}, reg, log)
				lc.Append(fx.Hook{OnStart: e.Start, OnStop: e.Stop})
				return e
			},
		),
		fx.Populate(&store, &notifier),
	)
	app.RequireStart()
	defer app.RequireStop()

	ctx := context.Background()
	fn, err := store.Create(ctx, &functions.Function{Namespace: "default", Name: "f", Spec: functions.Spec{
		Runtime: "python3.11", Handler: "handler.handle", TimeoutSeconds: 1, MemoryMB: 64, MaxInstances: 1, Concurrency: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// deploy uploads a handler returning v and waits until it is Ready.
	deploy := func(v string) *functions.Function {
		var buf bytes.Buffer
		w := zip.NewWriter(&buf)
		f, _ := w.Create("handler.py")
		f.Write([]byte("def handle(e, c): return " + v + "\n"))
		w.Close()
		blob, err := blobs.Put(ctx, &buf)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.SetCode(ctx, fn.Key(), blob.SHA256); err != nil {
			t.Fatal(err)
		}
		notifier.Changed(fn.Key())
		var got *functions.Function
		testenv.Eventually(t, 10*time.Second, "Ready", func() bool {
			got, err = store.Get(ctx, fn.Key())
			if err != nil {
				t.Fatal(err)
			}
			return got.Status.Phase == functions.PhaseReady && got.Status.ObservedGeneration == got.Generation
		})
		return got
	}
	v1 := deploy("1")
	v2 := deploy("2")
	testenv.Eventually(t, 10*time.Second, "the replaced artifact to be removed", func() bool {
		_, err := os.Stat(v1.Status.Artifact)
		return errors.Is(err, os.ErrNotExist)
	})
	if _, err := os.Stat(v2.Status.Artifact); err != nil {
		t.Errorf("the serving artifact: %v", err)
	}
}
