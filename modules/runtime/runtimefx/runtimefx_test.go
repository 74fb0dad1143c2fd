package runtimefx_test

import (
	"strings"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/python"
	"sless.kube5s.ru/sless/modules/runtime/runtimefx"
)

func TestModuleRegistersBuiltins(t *testing.T) {
	var reg *runtime.Registry
	app := fxtest.New(t, runtimefx.Module, fx.Populate(&reg))
	app.RequireStart().RequireStop()
	if got := strings.Join(reg.Names(), ","); got != "nodejs20,python3.11" {
		t.Errorf("runtimes: got %s, want nodejs20,python3.11", got)
	}
}

func TestDuplicateRuntimeFailsStartup(t *testing.T) {
	var reg *runtime.Registry
	app := fx.New(runtimefx.Module, fx.Provide(runtimefx.AsProvider(python.New)), fx.Populate(&reg), fx.NopLogger)
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), `runtime "python3.11" is registered twice`) {
		t.Errorf("got %v; want a start-up error naming the duplicate runtime", err)
	}
}
