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

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/build/buildfx"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/functions/functionsfx"
	"sless.kube5s.ru/sless/modules/runtime/runtimefx"
	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/storage/blobfs"
	"sless.kube5s.ru/sless/modules/storage/storagefx"
)

// notSuspended stands in for the triggers module, which decides suspension.
type notSuspended struct{}

func (notSuspended) Suspended(context.Context, functions.Key) (bool, error) { return false, nil }

// TestModuleReconcilesChanges wires the functions module with the modules it
// needs and checks that a change told to the notifier is built to Ready, and
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
	app := fxtest.New(t,
		storagefx.Module, runtimefx.Module, buildfx.Module, functionsfx.Module,
		fx.Supply(
			slog.New(slog.NewTextHandler(io.Discard, nil)),
			storagefx.Config{DatabaseURL: "sqlite:" + filepath.Join(dir, "db")},
			buildfx.Config{ArtifactDir: filepath.Join(dir, "artifacts"), Limits: safezip.DefaultLimits()},
			functionsfx.Config{UploadLimits: safezip.DefaultLimits(), UploadDir: dir, Workers: 2,
				ArtifactGrace: 100 * time.Millisecond},
			runtimefx.Config{},
			fx.Annotate(blobs, fx.As(new(storage.Blobs))),
		),
		fx.Provide(func() functions.Suspension { return notSuspended{} }),
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
