// Package runtime is the contract for language runtimes: what a runtime is
// (Provider), the optional capabilities a provider may have, and the Registry
// that collects providers from an fx value group so that a plugin adds a
// runtime by adding one fx module. See PROTOCOL.md for the instance protocol
// every runtime's wrapper implements.
package runtime

import (
	"context"
	"io"
	"os/exec"
)

// ProvidersGroup is the fx value-group tag that runtime providers are added to.
// Use it through runtimefx.AsProvider, or directly:
//
//	fx.Provide(fx.Annotate(NewMyRuntime, fx.As(new(runtime.Provider)), fx.ResultTags(runtime.ProvidersGroup)))
const ProvidersGroup = `group:"runtime.providers"`

// Provider describes one language runtime such as "python3.11".
//
// A provider is a name plus immutable facts; constructing one has no side
// effects (no process is started, no file is read). Methods are cheap and
// safe for concurrent use unless stated otherwise.
type Provider interface {
	// Name is the runtime's identifier in function specs: lower-case letters,
	// digits, '.', '-' and '_', starting with a letter, at most 32 bytes.
	Name() string
	// DefaultHandler is the handler used when a function names none, e.g.
	// "handler.handle".
	DefaultHandler() string
	// HandlerFiles returns the code files, relative to the code root, that
	// may hold the module of handler, in order of preference ("main.run" ->
	// ["main.py"]). It returns an error a user can act on when the handler
	// is malformed.
	HandlerFiles(handler string) ([]string, error)
	// BaseImage is the versioned container image the cluster mode builds on,
	// e.g. "sless-runtime-python3.11:v0.1.0". Never a ":latest" tag.
	BaseImage() string
	// Wrapper returns the file name and content of the in-instance wrapper
	// (see PROTOCOL.md) that the embedded mode writes to disk and runs.
	Wrapper() (name string, content []byte)
	// Interpreter resolves the program that runs the wrapper and the
	// arguments placed before the wrapper's path. It may start a process
	// once to resolve a version-manager shim to the real binary and caches
	// the result; it returns an error naming what is missing.
	Interpreter(ctx context.Context) (path string, args []string, err error)
}

// DependencyInstaller is implemented by providers whose code can declare
// dependencies (requirements.txt, package.json) that the builder installs into
// the artifact.
type DependencyInstaller interface {
	// DependencyFile is the manifest whose presence in the code root triggers
	// InstallDependencies, e.g. "requirements.txt".
	DependencyFile() string
	// InstallDependencies installs the dependencies declared in dir into dir,
	// writing the tool's output to out. It honours ctx's deadline and returns
	// an error that quotes the tool's failure. It runs its tools with
	// interp.RunTool, which confines them with ctx's Confiner (see
	// WithConfiner), and gives them no variable of the server's environment
	// but those interp.ToolEnv passes.
	InstallDependencies(ctx context.Context, dir string, out io.Writer) error
}

// Precompiler is a Provider that prepares the code of a build so that its
// instances start faster, e.g. by compiling it ahead.
type Precompiler interface {
	// Precompile prepares the code in dir in place. What it cannot prepare
	// it leaves as it was, and an error leaves dir as runnable as before.
	// Like InstallDependencies, it runs what it starts confined by ctx's
	// Confiner when it has one.
	Precompile(ctx context.Context, dir string) error
}

// Confiner runs the commands of dependency installs, which run user code
// (npm install scripts, pip's setup.py), in isolation.
type Confiner interface {
	// Confine rewrites cmd, about to run with dir (the code being built) as
	// its working directory, so that it runs confined with dir its only
	// writable path. release runs after cmd has ended.
	Confine(cmd *exec.Cmd, dir string) (release func(), err error)
}

type confinerKey struct{}

// WithConfiner returns ctx carrying c for the InstallDependencies it is
// passed to; the builder sets it, so that providers (plugins included) need
// no parameter of their own for it.
func WithConfiner(ctx context.Context, c Confiner) context.Context {
	return context.WithValue(ctx, confinerKey{}, c)
}

// ConfinerFrom returns ctx's Confiner, or nil.
func ConfinerFrom(ctx context.Context) Confiner {
	c, _ := ctx.Value(confinerKey{}).(Confiner)
	return c
}

// Forker is implemented by providers whose wrapper can run forked from a
// zygote: a program that imports the wrapper once and forks instances that
// share its memory (PROTOCOL.md, "Forked instances"). Runtimes whose
// interpreter cannot fork (V8 runs threads) do not implement it.
type Forker interface {
	// Zygote returns the file name and content of the zygote program,
	// which the Interpreter runs.
	Zygote() (name string, content []byte)
}

// StartupEnvReader is implemented by providers whose interpreter reads some
// environment variables only at process start (PYTHONPATH, NODE_OPTIONS).
// A function whose env sets such a variable cannot use a pre-started generic
// process and gets a fresh one started with its env instead.
type StartupEnvReader interface {
	ReadsAtStartup(envName string) bool
}
