// Package nodejs provides the nodejs20 runtime.
package nodejs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/interp"
	"sless.kube5s.ru/sless/runtimes"
)

// Name is the runtime's name in function specs.
const Name = "nodejs20"

// Provider is the nodejs20 runtime.
type Provider struct {
	resolver interp.Resolver
}

// New returns the nodejs20 runtime provider.
func New() *Provider {
	return &Provider{resolver: interp.Resolver{
		Candidates: []string{"node20", "node"},
		Probe:      []string{"-e", "console.log(process.execPath); console.log(process.versions.node)"},
		Version:    "20",
	}}
}

// Name implements runtime.Provider.
func (*Provider) Name() string { return Name }

// DefaultHandler implements runtime.Provider.
func (*Provider) DefaultHandler() string { return "handler.handle" }

// HandlerFiles implements runtime.Provider: CommonJS or ES modules.
func (*Provider) HandlerFiles(handler string) ([]string, error) {
	module, _, err := runtime.SplitHandler(handler)
	if err != nil {
		return nil, err
	}
	return []string{module + ".js", module + ".mjs", module + ".cjs"}, nil
}

// BaseImage implements runtime.Provider.
func (*Provider) BaseImage() string { return "sless-runtime-nodejs20:v0.1.0" }

// Wrapper implements runtime.Provider.
func (*Provider) Wrapper() (string, []byte) { return "server.js", runtimes.NodeServer }

// Interpreter implements runtime.Provider.
func (p *Provider) Interpreter(ctx context.Context) (string, []string, error) {
	path, err := p.resolver.Resolve(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("runtime %s: %w", Name, err)
	}
	return path, nil, nil
}

// DependencyFile implements runtime.DependencyInstaller.
func (*Provider) DependencyFile() string { return "package.json" }

// InstallDependencies implements runtime.DependencyInstaller: production
// dependencies only, from the lock file when the code has one.
func (p *Provider) InstallDependencies(ctx context.Context, dir string, out io.Writer) error {
	cmd, err := p.npmInstall(ctx, dir)
	if err != nil {
		return err
	}
	cmd.Env = interp.ToolEnv("NODE_ENV=production")
	return interp.RunTool(ctx, cmd, out)
}

// npmInstall returns the npm command that installs dir's production
// dependencies (see npmVerb).
func (p *Provider) npmInstall(ctx context.Context, dir string, args ...string) (*exec.Cmd, error) {
	node, _, err := p.Interpreter(ctx)
	if err != nil {
		return nil, err
	}
	// npm next to the resolved node is the one that matches it.
	npm := filepath.Join(filepath.Dir(node), "npm")
	if _, err := os.Stat(npm); err != nil {
		if npm, err = exec.LookPath("npm"); err != nil {
			return nil, fmt.Errorf("runtime %s: npm is needed to install package.json dependencies: %w", Name, err)
		}
	}
	verb := npmVerb(func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, name))
		return err == nil
	})
	cmd := exec.CommandContext(ctx, npm, append(append([]string{verb}, npmFlags...), args...)...)
	cmd.Dir = dir
	return cmd, nil
}

// npmFlags are the flags of every install: production dependencies only,
// quietly.
var npmFlags = []string{"--omit=dev", "--no-audit", "--no-fund", "--no-update-notifier", "--loglevel=error"}

// npmVerb is the npm command that installs the dependencies of code whose
// root has the files that has reports: `npm ci` with a lock file, `npm
// install` without.
func npmVerb(has func(name string) bool) string {
	if has("package-lock.json") || has("npm-shrinkwrap.json") {
		return "ci"
	}
	return "install"
}

// DockerfileInstall implements runtime.DockerfileRuntime: npm installs the
// production dependencies as InstallDependencies does, install scripts
// included, with its cache in a directory that the same step removes.
func (p *Provider) DockerfileInstall(has func(name string) bool) string {
	const cache = "/tmp/sless-npm-cache"
	return "npm " + npmVerb(has) + " " + strings.Join(npmFlags, " ") + " --cache " + cache + " && rm -rf " + cache
}

// ImageLayout implements runtime.ImageRuntime.
func (p *Provider) ImageLayout() runtime.ImageLayout {
	wrapper, _ := p.Wrapper()
	return runtime.ImageLayout{Interpreter: "node", Wrapper: wrapper, DepsDir: "node_modules",
		DependencyFiles: []string{"package.json", "package-lock.json", "npm-shrinkwrap.json"},
		Env:             []string{"NODE_ENV=production"}}
}

// InstallImageDependencies implements runtime.ImageRuntime: npm installs
// the packages for the image's platform without running their install
// scripts, and fails when a package has one (a native build, usually),
// since it would be missing what the script makes.
func (p *Provider) InstallImageDependencies(ctx context.Context, dir, platform string, env []string, out io.Writer) error {
	osName, cpu, ok := strings.Cut(platform, "/")
	if cpu == "amd64" {
		cpu = "x64"
	}
	if !ok || osName != "linux" || (cpu != "x64" && cpu != "arm64") {
		return fmt.Errorf("platform %q: want linux/amd64 or linux/arm64", platform)
	}
	cmd, err := p.npmInstall(ctx, dir, "--ignore-scripts", "--os="+osName, "--cpu="+cpu)
	if err != nil {
		return err
	}
	cmd.Env = append(interp.ToolEnv("NODE_ENV=production"), env...)
	if err := interp.RunTool(ctx, cmd, out); err != nil {
		return err
	}
	scripted, err := withInstallScripts(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if err != nil {
		return err
	}
	if len(scripted) > 0 {
		return fmt.Errorf("%w: %s must run an install script (a native build, usually), which is not run here",
			runtime.ErrNeedsBuild, strings.Join(scripted, ", "))
	}
	return nil
}

// withInstallScripts lists the packages that npm's hidden lock file (written
// by every install) marks as having install scripts, sorted.
func withInstallScripts(lockFile string) ([]string, error) {
	data, err := os.ReadFile(lockFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // no dependencies at all
	}
	if err != nil {
		return nil, err
	}
	var lock struct {
		Packages map[string]struct {
			HasInstallScript bool `json:"hasInstallScript"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(data, &lock); err != nil {
		return nil, fmt.Errorf("reading npm's record of the installed packages: %w", err)
	}
	var names []string
	for path, pkg := range lock.Packages {
		if pkg.HasInstallScript {
			const dir = "node_modules/"
			names = append(names, path[strings.LastIndex(path, dir)+len(dir):])
		}
	}
	slices.Sort(names)
	return names, nil
}

// ReadsAtStartup implements runtime.StartupEnvReader: Node.js and libuv read
// NODE_OPTIONS, NODE_PATH, UV_THREADPOOL_SIZE and friends when they start.
func (*Provider) ReadsAtStartup(env string) bool {
	return strings.HasPrefix(env, "NODE_") || strings.HasPrefix(env, "UV_")
}
