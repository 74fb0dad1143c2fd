// Package buildfx provides the build module with the local builder.
package buildfx

import (
	"log/slog"

	"go.uber.org/fx"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/local"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/storage"
)

// Config configures the build module.
type Config struct {
	// ArtifactDir holds the local builder's artifacts.
	ArtifactDir string
	// Limits bound the archives the builder extracts.
	Limits safezip.Limits
}

// Module is the build module.
var Module = fx.Module("build",
	fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "build") }),
	fx.Provide(newLocal),
)

// newLocal returns the local builder, whose dependency installs run confined
// by the runtime module's Confiner (nil when the sandbox is off).
func newLocal(c Config, blobs storage.Blobs, runtimes *runtime.Registry, confine runtime.Confiner, log *slog.Logger) (build.Builder, error) {
	return local.New(c.ArtifactDir, blobs, runtimes, c.Limits, confine, log)
}
