// Package buildfx provides the build module with the local builder.
package buildfx

import (
	"log/slog"
	"time"

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
	// Timeout bounds one build; default 10m.
	Timeout time.Duration
}

// Module is the build module.
var Module = fx.Module("build",
	fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "build") }),
	fx.Provide(newLocal),
)

// newLocal returns the local builder, whose dependency installs run confined
// by the runtime module's Confiner (nil when the sandbox is off).
func newLocal(lc fx.Lifecycle, c Config, blobs storage.Blobs, runtimes *runtime.Registry, confine runtime.Confiner, log *slog.Logger) (build.Builder, error) {
	b, err := local.New(local.Config{Dir: c.ArtifactDir, Limits: c.Limits, Timeout: c.Timeout}, blobs, runtimes, confine, log)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{OnStart: b.Start, OnStop: b.Stop})
	return b, nil
}
