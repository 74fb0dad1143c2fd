package runtime

import (
	"context"
	"errors"
	"io"
	"path"
	"strconv"
)

// The image layout: where a runtime image (runtimes/<runtime>/Dockerfile)
// and the images the crane builder makes from it keep the wrapper, the code
// and its dependencies. The wrapper runs in its --code-dir mode (PROTOCOL.md),
// so it finds the code at ImageCodeDir and the dependencies where it looks in
// every mode: ImageLayout.DepsDir below the code. runtimes/layout_test.go
// checks that the Dockerfiles, the wrappers and the providers agree.
const (
	// ImageWrapperDir holds the wrapper, under its file name (Provider.Wrapper).
	ImageWrapperDir = "/sless"
	// ImageCodeDir holds the function's code: its own image layer, owned by
	// root and read-only to the instance's user.
	ImageCodeDir = "/code"
	// ImageUser is the user and group instances run as: not root, and owning
	// nothing in the image.
	ImageUser = "65532:65532"
	// ImagePort is the TCP port the wrapper listens on, on every address.
	ImagePort = 8080
	// ImageHealthPath is the wrapper's health endpoint on ImagePort: it
	// answers 200 to a GET once the handler is loaded, which in the
	// --code-dir mode is as soon as the port accepts connections.
	ImageHealthPath = "/_sless/health"
)

// ImageLayout is what one runtime's images hold besides the common layout.
type ImageLayout struct {
	// Interpreter is the program that runs the wrapper, found on the
	// image's PATH, e.g. "python3.11".
	Interpreter string
	// Wrapper is the wrapper's file name in ImageWrapperDir, e.g. "server.py".
	Wrapper string
	// DepsDir is where the dependency layer is, relative to ImageCodeDir
	// (".deps", "node_modules").
	DepsDir string
	// DependencyFiles are the files of the code root that declare the
	// dependencies: the first one's presence means there are some, and all
	// of them (those present) are what the dependency layer is built from.
	DependencyFiles []string
	// Env is the runtime's settings in the image ("K=V").
	Env []string
}

// WrapperPath is where the wrapper is in the image.
func (l ImageLayout) WrapperPath() string { return path.Join(ImageWrapperDir, l.Wrapper) }

// Entrypoint runs the wrapper specialized at start from the code; the image
// adds "--handler" and the function's handler as its command.
func (l ImageLayout) Entrypoint() []string {
	return []string{l.Interpreter, l.WrapperPath(), "--listen", "tcp:0.0.0.0:" + strconv.Itoa(ImagePort), "--code-dir", ImageCodeDir}
}

// ErrNeedsBuild is wrapped by ImageRuntime.InstallImageDependencies when a
// dependency has no binary package for the image's platform or must run code
// (a native build) to install.
var ErrNeedsBuild = errors.New("a dependency needs a build step")

// ImageRuntime is implemented by providers whose functions the crane builder
// turns into images layered onto BaseImage.
type ImageRuntime interface {
	// ImageLayout is the runtime's part of the image layout; it is constant.
	ImageLayout() ImageLayout
	// InstallImageDependencies installs the dependencies that the
	// DependencyFiles in dir declare into dir/DepsDir, for platform
	// ("linux/amd64", "linux/arm64"), from binary packages only and running
	// no code of the packages, so that it needs no confinement. env ("K=V")
	// is added to the tool's environment (an index URL, a proxy). It writes
	// the tool's output to out and honours ctx's deadline. A dependency that
	// cannot be installed so fails with an error wrapping ErrNeedsBuild.
	InstallImageDependencies(ctx context.Context, dir, platform string, env []string, out io.Writer) error
}

// DockerfileRuntime is implemented by image runtimes whose dependencies an
// image build from a Dockerfile (the kaniko builder) installs inside the
// image: with the image's own tools, running what the packages run to
// install (native builds included), which InstallImageDependencies refuses
// to do.
type DockerfileRuntime interface {
	// DockerfileInstall is the shell command of the Dockerfile's RUN step
	// that installs the dependencies the DependencyFiles declare into
	// DepsDir. It runs with /bin/sh, as root, in ImageCodeDir holding the
	// code; has reports whether the code's root has a file (a lock file).
	// The command leaves no cache of the tools in the image.
	DockerfileInstall(has func(name string) bool) string
}
