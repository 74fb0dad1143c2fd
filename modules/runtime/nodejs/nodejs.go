// Package nodejs provides the nodejs20 runtime.
package nodejs

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
	node, _, err := p.Interpreter(ctx)
	if err != nil {
		return err
	}
	// npm next to the resolved node is the one that matches it.
	npm := filepath.Join(filepath.Dir(node), "npm")
	if _, err := os.Stat(npm); err != nil {
		if npm, err = exec.LookPath("npm"); err != nil {
			return fmt.Errorf("runtime %s: npm is needed to install package.json dependencies: %w", Name, err)
		}
	}
	verb := "install"
	if _, err := os.Stat(filepath.Join(dir, "package-lock.json")); err == nil {
		verb = "ci"
	}
	cmd := exec.CommandContext(ctx, npm, verb, "--omit=dev", "--no-audit", "--no-fund", "--no-update-notifier", "--loglevel=error")
	cmd.Dir = dir
	cmd.Env = interp.ToolEnv("NODE_ENV=production")
	return interp.RunTool(ctx, cmd, out)
}

// ReadsAtStartup implements runtime.StartupEnvReader: Node.js and libuv read
// NODE_OPTIONS, NODE_PATH, UV_THREADPOOL_SIZE and friends when they start.
func (*Provider) ReadsAtStartup(env string) bool {
	return strings.HasPrefix(env, "NODE_") || strings.HasPrefix(env, "UV_")
}
