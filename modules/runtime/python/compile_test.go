package python_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sless.kube5s.ru/sless/modules/runtime/python"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPrecompile checks that the modules of a build import from the .pyc
// files Precompile wrote, by changing every source after it ran: an import
// that compiled a source again would see the change.
func TestPrecompile(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	write(t, filepath.Join(dir, "handler.py"), "VALUE = 'compiled'\n")
	write(t, filepath.Join(dir, "pkg", "__init__.py"), "")
	write(t, filepath.Join(dir, "pkg", "mod.py"), "VALUE = 'compiled'\n")
	write(t, filepath.Join(dir, "broken.py"), "def (:\n")
	write(t, filepath.Join(dir, ".deps", "dep.py"), "VALUE = 'compiled'\n")
	// A stale .pyc shipped with the code is replaced; a __pycache__ that is
	// a symbolic link is left alone, and nothing is written where it points.
	write(t, filepath.Join(dir, "pkg", "__pycache__", "mod.cpython-311.pyc"), "stale")
	write(t, filepath.Join(dir, "linked", "mod.py"), "VALUE = 'compiled'\n")
	if err := os.Symlink(outside, filepath.Join(dir, "linked", "__pycache__")); err != nil {
		t.Fatal(err)
	}

	p := python.New()
	if err := p.Precompile(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"handler.py", "pkg/mod.py", "broken.py", ".deps/dep.py", "linked/mod.py"} {
		write(t, filepath.Join(dir, f), "VALUE = 'source'\n")
	}
	if entries, _ := os.ReadDir(outside); len(entries) > 0 {
		t.Errorf("Precompile wrote %s through a symbolic link", entries[0].Name())
	}
	python3, _, err := p.Interpreter(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python3, "-B", "-c", `
import sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/.deps"]
import handler, pkg.mod, broken, dep, linked.mod
print(handler.VALUE, pkg.mod.VALUE, broken.VALUE, dep.VALUE, linked.mod.VALUE)
`, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("importing the modules: %v\n%s", err, out)
	}
	// handler and pkg.mod from their .pyc; the rest was not compiled ahead.
	if got, want := strings.TrimSpace(string(out)), "compiled compiled source source source"; got != want {
		t.Errorf("the modules' values are %q, want %q (handler, pkg.mod, broken, dep, linked.mod)", got, want)
	}
}

// TestPrecompileAfterCancel checks that a build whose context ends while it
// compiles fails and stops the compiler, and that the next build compiles
// with a new one.
func TestPrecompileAfterCancel(t *testing.T) {
	p := python.New()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "first.py"), "VALUE = 1\n")
	if err := p.Precompile(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "second.py"), "VALUE = 2\n")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.Precompile(ctx, dir); err == nil {
		t.Error("Precompile with a cancelled context succeeded")
	}
	write(t, filepath.Join(dir, "third.py"), "VALUE = 3\n")
	if err := p.Precompile(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"first", "second", "third"} {
		if _, err := os.Stat(filepath.Join(dir, "__pycache__", name+".cpython-311.pyc")); err != nil {
			t.Error(err)
		}
	}
}
