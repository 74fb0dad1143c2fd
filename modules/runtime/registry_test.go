package runtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"sless.kube5s.ru/sless/modules/runtime"
)

type fake struct{ name string }

func (f fake) Name() string                                        { return f.name }
func (fake) DefaultHandler() string                                { return "handler.handle" }
func (fake) HandlerFiles(string) ([]string, error)                 { return nil, nil }
func (fake) BaseImage() string                                     { return "img:v1" }
func (fake) Wrapper() (string, []byte)                             { return "w", nil }
func (fake) Interpreter(context.Context) (string, []string, error) { return "", nil, nil }

func TestRegistry(t *testing.T) {
	reg, err := runtime.NewRegistry([]runtime.Provider{fake{"zeta"}, fake{"alpha1.0"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(reg.Names(), ","); got != "alpha1.0,zeta" {
		t.Errorf("Names: got %s, want sorted alpha1.0,zeta", got)
	}
	if p, err := reg.Get("zeta"); err != nil || p.Name() != "zeta" {
		t.Errorf("Get(zeta): %v, %v", p, err)
	}
	_, err = reg.Get("nope")
	if !errors.Is(err, runtime.ErrUnknown) || !strings.Contains(err.Error(), "known runtimes: alpha1.0, zeta") {
		t.Errorf("Get(nope): got %v; want ErrUnknown listing the known runtimes", err)
	}
	for _, bad := range [][]runtime.Provider{{fake{"a"}, fake{"a"}}, {fake{"Upper"}}, {fake{""}}, {fake{"1x"}}, {nil}} {
		if _, err := runtime.NewRegistry(bad); err == nil {
			t.Errorf("NewRegistry(%v) succeeded; want an error", bad)
		}
	}
}

func TestSplitHandler(t *testing.T) {
	tests := []struct{ in, module, function string }{
		{"handler.handle", "handler", "handle"},
		{"main.run", "main", "run"},
		{"src/app.main", "src/app", "main"},
		{"pkg.mod.fn", "pkg/mod", "fn"},
		{"handler", "", ""},
		{".handle", "", ""},
		{"handler.", "", ""},
		{"../x.handle", "", ""},
		{"/abs.handle", "", ""},
		{"a//b.c", "", ""},
		{"h.1bad", "", ""},
	}
	for _, tt := range tests {
		m, f, err := runtime.SplitHandler(tt.in)
		if tt.module == "" {
			if err == nil {
				t.Errorf("SplitHandler(%q) = %q, %q; want an error", tt.in, m, f)
			}
			continue
		}
		if err != nil || m != tt.module || f != tt.function {
			t.Errorf("SplitHandler(%q) = %q, %q, %v; want %q, %q", tt.in, m, f, err, tt.module, tt.function)
		}
	}
}
