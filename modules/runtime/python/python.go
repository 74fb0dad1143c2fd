// Package python provides the python3.11 runtime.
package python

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/interp"
	"sless.kube5s.ru/sless/runtimes"
)

// Name is the runtime's name in function specs.
const Name = "python3.11"

// DepsDir is the directory, relative to the code root, that requirements are
// installed into; the wrapper puts it on sys.path.
const DepsDir = ".deps"

// Provider is the python3.11 runtime.
type Provider struct {
	resolver interp.Resolver
}

// New returns the python3.11 runtime provider.
func New() *Provider {
	return &Provider{resolver: interp.Resolver{
		Candidates: []string{"python3.11", "python3"},
		Probe:      []string{"-c", "import sys; print(sys.executable); print('%d.%d.%d' % sys.version_info[:3])"},
		Version:    "3.11",
	}}
}

// Name implements runtime.Provider.
func (*Provider) Name() string { return Name }

// DefaultHandler implements runtime.Provider.
func (*Provider) DefaultHandler() string { return "handler.handle" }

// HandlerFiles implements runtime.Provider: a module is a .py file or a
// package directory.
func (*Provider) HandlerFiles(handler string) ([]string, error) {
	module, _, err := runtime.SplitHandler(handler)
	if err != nil {
		return nil, err
	}
	return []string{module + ".py", module + "/__init__.py"}, nil
}

// BaseImage implements runtime.Provider.
func (*Provider) BaseImage() string { return "sless-runtime-python3.11:v0.1.0" }

// Wrapper implements runtime.Provider.
func (*Provider) Wrapper() (string, []byte) { return "server.py", runtimes.PythonServer }

// Interpreter implements runtime.Provider.
func (p *Provider) Interpreter(ctx context.Context) (string, []string, error) {
	path, err := p.resolver.Resolve(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("runtime %s: %w", Name, err)
	}
	return path, nil, nil
}

// DependencyFile implements runtime.DependencyInstaller.
func (*Provider) DependencyFile() string { return "requirements.txt" }

// InstallDependencies implements runtime.DependencyInstaller: pip installs
// the requirements into dir/.deps, run from dir so that relative paths in
// requirements.txt (local wheels) resolve inside the code.
func (p *Provider) InstallDependencies(ctx context.Context, dir string, out io.Writer) error {
	python, _, err := p.Interpreter(ctx)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, python, "-m", "pip", "install",
		"--no-input", "--disable-pip-version-check", "--no-warn-script-location",
		"--target", filepath.Join(dir, DepsDir), "-r", "requirements.txt")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	return interp.RunTool(cmd, out)
}

// ReadsAtStartup implements runtime.StartupEnvReader: CPython reads PYTHON*
// variables (PYTHONPATH, PYTHONHASHSEED, ...) only when it starts.
func (*Provider) ReadsAtStartup(env string) bool { return strings.HasPrefix(env, "PYTHON") }
