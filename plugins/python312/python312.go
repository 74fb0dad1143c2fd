// Package python312 is an example runtime plugin: it adds the runtime
// "python3.12", served by the same wrapper as python3.11 and run by a
// python3.12 interpreter. To enable it, add python312.Module to the plugins
// of cmd/sless/main.go (see docs/plugins.md).
package python312

import (
	"go.uber.org/fx"

	"sless.kube5s.ru/sless/modules/runtime/python"
	"sless.kube5s.ru/sless/modules/runtime/runtimefx"
)

// Module adds the python3.12 runtime.
var Module = fx.Module("python3.12",
	fx.Provide(runtimefx.AsProvider(New)),
)

// New returns the python3.12 runtime provider.
func New() *python.Provider { return python.NewVersion("3.12") }
