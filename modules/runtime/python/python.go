// Package python provides the python3.11 runtime, and other CPython
// versions for plugins (NewVersion): the wrapper uses the standard library
// only (and uvloop when the interpreter has it) and runs on any CPython 3.9
// or later.
package python

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"

	"sless.kube5s.ru/sless/internal/tail"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/interp"
	"sless.kube5s.ru/sless/runtimes"
)

// DepsDir is the directory, relative to the code root, that requirements are
// installed into; the wrapper puts it on sys.path.
const DepsDir = ".deps"

// Provider is a CPython runtime.
type Provider struct {
	name     string
	resolver interp.Resolver
	compiler compiler
}

// New returns the python3.11 runtime provider.
func New() *Provider { return NewVersion("3.11") }

// NewVersion returns the provider of runtime "python<version>" (version is
// "major.minor"), running `python<version>` or a `python3` of that version.
func NewVersion(version string) *Provider {
	return &Provider{name: "python" + version, resolver: interp.Resolver{
		Candidates: []string{"python" + version, "python3"},
		Probe:      []string{"-c", "import sys; print(sys.executable); print('%d.%d.%d' % sys.version_info[:3])"},
		Version:    version,
	}}
}

// Name implements runtime.Provider.
func (p *Provider) Name() string { return p.name }

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
func (p *Provider) BaseImage() string { return "sless-runtime-" + p.name + ":v0.1.0" }

// Wrapper implements runtime.Provider.
func (*Provider) Wrapper() (string, []byte) { return "server.py", runtimes.PythonServer }

// Zygote implements runtime.Forker.
func (*Provider) Zygote() (string, []byte) { return "zygote.py", runtimes.PythonZygote }

// Interpreter implements runtime.Provider.
func (p *Provider) Interpreter(ctx context.Context) (string, []string, error) {
	path, err := p.resolver.Resolve(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("runtime %s: %w", p.name, err)
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
	cmd.Env = interp.ToolEnv("PYTHONDONTWRITEBYTECODE=1")
	return interp.RunTool(ctx, cmd, out)
}

// ImageLayout implements runtime.ImageRuntime.
func (p *Provider) ImageLayout() runtime.ImageLayout {
	wrapper, _ := p.Wrapper()
	return runtime.ImageLayout{Interpreter: p.name, Wrapper: wrapper, DepsDir: DepsDir,
		DependencyFiles: []string{"requirements.txt"},
		Env:             []string{"PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"}}
}

// DockerfileInstall implements runtime.DockerfileRuntime: pip installs
// the requirements as InstallDependencies does, as root without a warning
// about it and keeping no download cache. Unlike the crane builder's
// install it compiles the modules: an image build is not reproducible
// anyway, and the .pyc files, which the image's read-only code would never
// get otherwise, spare every cold start the compilation.
func (p *Provider) DockerfileInstall(func(string) bool) string {
	return p.name + " -m pip install --no-input --disable-pip-version-check --no-warn-script-location" +
		" --root-user-action=ignore --no-cache-dir --target " + DepsDir + " -r requirements.txt"
}

// imageGlibcMinor is the glibc of the base images (Debian 12: 2.36): the
// newest manylinux wheels they run.
const imageGlibcMinor = 36

// InstallImageDependencies implements runtime.ImageRuntime: pip installs
// binary wheels only (no setup.py runs) for the image's CPython version and
// platform, without compiling them (the .pyc files would carry the install
// time).
func (p *Provider) InstallImageDependencies(ctx context.Context, dir, platform string, env []string, out io.Writer) error {
	arch, err := wheelArch(platform)
	if err != nil {
		return err
	}
	python, _, err := p.Interpreter(ctx)
	if err != nil {
		return err
	}
	args := []string{"-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--no-warn-script-location",
		"--no-compile", "--target", filepath.Join(dir, DepsDir), "--only-binary=:all:",
		"--implementation", "cp", "--python-version", strings.TrimPrefix(p.name, "python")}
	// pip does not expand PEP 600 tags to the older ones they include.
	for minor := imageGlibcMinor; minor >= 17; minor-- {
		args = append(args, "--platform", fmt.Sprintf("manylinux_2_%d_%s", minor, arch))
	}
	args = append(args, "--platform", "manylinux2014_"+arch, "-r", "requirements.txt")
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Dir = dir
	cmd.Env = append(interp.ToolEnv("PYTHONDONTWRITEBYTECODE=1"), env...)
	tb := &tail.Buffer{Max: 16 << 10}
	err = interp.RunTool(ctx, cmd, io.MultiWriter(out, tb))
	if err != nil && strings.Contains(tb.String(), "No matching distribution found") {
		return fmt.Errorf("%w: pip found no binary wheel of a requirement for CPython %s on %s: %w",
			runtime.ErrNeedsBuild, strings.TrimPrefix(p.name, "python"), platform, err)
	}
	return err
}

// wheelArch is the architecture of platform in wheel tags.
func wheelArch(platform string) (string, error) {
	switch platform {
	case "linux/amd64":
		return "x86_64", nil
	case "linux/arm64":
		return "aarch64", nil
	}
	return "", fmt.Errorf("platform %q: want linux/amd64 or linux/arm64", platform)
}

// ReadsAtStartup implements runtime.StartupEnvReader: CPython reads PYTHON*
// variables (PYTHONPATH, PYTHONHASHSEED, ...) only when it starts.
func (*Provider) ReadsAtStartup(env string) bool { return strings.HasPrefix(env, "PYTHON") }
