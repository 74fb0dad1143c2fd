package buildfx_test

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/buildfx"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/runtime/runtimefx"
	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/storage/blobfs"
)

func TestModuleProvidesTheLocalBuilder(t *testing.T) {
	dir := t.TempDir()
	blobs, err := blobfs.New(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	var b build.Builder
	fxtest.New(t, runtimefx.Module, buildfx.Module,
		fx.Supply(
			slog.New(slog.NewTextHandler(io.Discard, nil)),
			buildfx.Config{ArtifactDir: filepath.Join(dir, "artifacts"), Limits: safezip.DefaultLimits()},
			fx.Annotate(blobs, fx.As(new(storage.Blobs))),
			runtimefx.Config{},
		),
		fx.Populate(&b),
	).RequireStart().RequireStop()
	if b == nil {
		t.Fatal("no builder")
	}
	if _, err := os.Stat(filepath.Join(dir, "artifacts")); err != nil {
		t.Errorf("artifact directory: %v", err)
	}
}
