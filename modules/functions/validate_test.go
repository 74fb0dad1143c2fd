package functions_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/nodejs"
	"sless.kube5s.ru/sless/modules/runtime/python"
)

func registry(t *testing.T) *runtime.Registry {
	t.Helper()
	r, err := runtime.NewRegistry([]runtime.Provider{python.New(), nodejs.New()})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestApplyDefaults(t *testing.T) {
	spec := functions.Spec{Runtime: "nodejs20", MinInstances: 12}
	functions.ApplyDefaults(&spec, registry(t))
	want := functions.Spec{Runtime: "nodejs20", Handler: "handler.handle", TimeoutSeconds: 30, MemoryMB: 256,
		MinInstances: 12, MaxInstances: 12, Concurrency: 1}
	if spec.Handler != want.Handler || spec.TimeoutSeconds != want.TimeoutSeconds || spec.MemoryMB != want.MemoryMB ||
		spec.MaxInstances != want.MaxInstances || spec.Concurrency != want.Concurrency || spec.Egress != "all" {
		t.Errorf("got %+v, want %+v", spec, want)
	}
}

func TestValidate(t *testing.T) {
	reg := registry(t)
	valid := func() *functions.Function {
		fn := &functions.Function{Name: "hello", Namespace: "default", Spec: functions.Spec{Runtime: "python3.11"}}
		functions.ApplyDefaults(&fn.Spec, reg)
		return fn
	}
	tests := []struct {
		name   string
		mutate func(fn *functions.Function)
		// fields are the invalid fields expected, and wantMsg parts of the message.
		fields  []string
		wantMsg []string
	}{
		{name: "valid", mutate: func(*functions.Function) {}},
		{name: "63 character name", mutate: func(fn *functions.Function) { fn.Name = strings.Repeat("a", 63) }},
		{name: "64 character name", mutate: func(fn *functions.Function) { fn.Name = strings.Repeat("a", 64) },
			fields: []string{"name"}, wantMsg: []string{"at most 63"}},
		{name: "upper case name", mutate: func(fn *functions.Function) { fn.Name = "Hello" },
			fields: []string{"name"}, wantMsg: []string{`"Hello" must consist of lower-case letters`}},
		{name: "name ends with dash", mutate: func(fn *functions.Function) { fn.Name = "hello-" }, fields: []string{"name"}},
		{name: "reserved namespace", mutate: func(fn *functions.Function) { fn.Namespace = "kube-system" },
			fields: []string{"namespace"}, wantMsg: []string{`"kube-system" starts with "kube-", which Kubernetes reserves`}},
		{name: "namespace that only contains kube", mutate: func(fn *functions.Function) { fn.Namespace = "my-kube-apps" }},
		{name: "empty name", mutate: func(fn *functions.Function) { fn.Name = "" }, fields: []string{"name"}, wantMsg: []string{"name: is required"}},
		{name: "unknown runtime lists known ones", mutate: func(fn *functions.Function) { fn.Runtime = "ruby3" },
			fields: []string{"runtime"}, wantMsg: []string{`unknown runtime "ruby3"`, "nodejs20, python3.11"}},
		{name: "missing runtime", mutate: func(fn *functions.Function) { fn.Runtime = "" }, fields: []string{"runtime"}},
		{name: "handler without function", mutate: func(fn *functions.Function) { fn.Handler = "handler" },
			fields: []string{"handler"}, wantMsg: []string{"<file>.<function>"}},
		{name: "handler escaping", mutate: func(fn *functions.Function) { fn.Handler = "../x.handle" }, fields: []string{"handler"}},
		{name: "handler in a directory", mutate: func(fn *functions.Function) { fn.Handler = "src/app.main" }},
		{name: "timeout too long", mutate: func(fn *functions.Function) { fn.TimeoutSeconds = 901 },
			fields: []string{"timeout_seconds"}, wantMsg: []string{"between 1 and 900 (got 901)"}},
		{name: "negative timeout", mutate: func(fn *functions.Function) { fn.TimeoutSeconds = -1 }, fields: []string{"timeout_seconds"}},
		{name: "memory too small", mutate: func(fn *functions.Function) { fn.MemoryMB = 16 }, fields: []string{"memory_mb"}},
		{name: "min above max", mutate: func(fn *functions.Function) { fn.MinInstances, fn.MaxInstances = 5, 2 },
			fields: []string{"min_instances"}, wantMsg: []string{"between 0 and 2 (got 5)"}},
		{name: "too many instances", mutate: func(fn *functions.Function) { fn.MaxInstances = 101 }, fields: []string{"max_instances"}},
		{name: "zero concurrency", mutate: func(fn *functions.Function) { fn.Concurrency = -3 }, fields: []string{"concurrency"}},
		{name: "public egress", mutate: func(fn *functions.Function) { fn.Egress = "public" }},
		{name: "unknown egress", mutate: func(fn *functions.Function) { fn.Egress = "private" },
			fields: []string{"egress"}, wantMsg: []string{`egress: must be "all" or "public" (got "private")`}},
		{name: "egress too long", mutate: func(fn *functions.Function) { fn.Egress = strings.Repeat("e", 1000) },
			fields: []string{"egress"}, wantMsg: []string{"egress: must be at most 16 bytes (got 1000)"}},
		{name: "bad env name", mutate: func(fn *functions.Function) { fn.Env = map[string]string{"1X": "a", "OK": "b"} },
			fields: []string{"env.1X"}},
		{name: "reserved env name", mutate: func(fn *functions.Function) { fn.Env = map[string]string{"SLESS_X": "a"} },
			fields: []string{"env.SLESS_X"}, wantMsg: []string{"reserved"}},
		{name: "NUL in env value", mutate: func(fn *functions.Function) { fn.Env = map[string]string{"X": "a\x00b"} }, fields: []string{"env.X"}},
		{name: "env too large", mutate: func(fn *functions.Function) { fn.Env = map[string]string{"X": strings.Repeat("v", 65<<10)} },
			fields: []string{"env"}},
		{name: "256 byte handler", mutate: func(fn *functions.Function) { fn.Handler = strings.Repeat("h", 249) + ".handle" }},
		{name: "handler too long", mutate: func(fn *functions.Function) { fn.Handler = strings.Repeat("h", 5000) + ".handle" },
			fields: []string{"handler"}, wantMsg: []string{"handler: must be at most 256 bytes (got 5007)"}},
		{name: "runtime too long", mutate: func(fn *functions.Function) { fn.Runtime = strings.Repeat("r", 1000) },
			fields: []string{"runtime"}, wantMsg: []string{"runtime: must be at most 32 bytes (got 1000)"}},
		{name: "too many env variables", mutate: func(fn *functions.Function) {
			fn.Env = map[string]string{}
			for i := range 257 {
				fn.Env[fmt.Sprintf("V%d", i)] = "x"
			}
		}, fields: []string{"env"}, wantMsg: []string{"env: has 257 variables; the limit is 256"}},
		{name: "env name too long", mutate: func(fn *functions.Function) { fn.Env = map[string]string{strings.Repeat("N", 300): "x"} },
			fields: []string{"env"}, wantMsg: []string{"env: a variable name is 300 bytes; the limit is 256"}},
		{name: "several fields at once", mutate: func(fn *functions.Function) { fn.Name, fn.MemoryMB = "", 1<<20 },
			fields: []string{"name", "memory_mb"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn := valid()
			tt.mutate(fn)
			err := functions.Validate(fn, reg)
			if len(tt.fields) == 0 {
				if err != nil {
					t.Fatalf("got %v, want valid", err)
				}
				return
			}
			var ve *validation.Errors
			if !errors.As(err, &ve) {
				t.Fatalf("got %v, want *validation.Errors", err)
			}
			var got []string
			for _, f := range ve.Fields {
				got = append(got, f.Field)
			}
			if strings.Join(got, ",") != strings.Join(tt.fields, ",") {
				t.Errorf("invalid fields: got %v, want %v (%v)", got, tt.fields, err)
			}
			for _, m := range tt.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message %q does not contain %q", err, m)
				}
			}
		})
	}
}
