// Package build is the contract for turning uploaded code into a runnable
// artifact: the Builder interface, its Request and Result, and the Error type
// that carries a message for the user. The local builder lives in
// build/local; cluster builders (crane, kaniko) implement the same contract.
package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// keyVersion changes when the artifact format changes, so that old artifacts
// are not reused for new servers.
const keyVersion = "sless-build/v1"

// Request asks for the artifact of one function's code.
type Request struct {
	// Namespace and Function name the function, for logs.
	Namespace, Function string
	// Runtime is the registered runtime name.
	Runtime string
	// Handler is the function's handler; the builder checks that its file
	// exists in the code.
	Handler string
	// CodeSHA256 is the blob key of the uploaded zip.
	CodeSHA256 string
}

// Key identifies what a build produces: the same code, runtime and handler
// give the same key, so a reconcile that finds its key recorded on the
// function never builds again.
func (r Request) Key() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s", keyVersion, r.Runtime, r.CodeSHA256, r.Handler)
	return hex.EncodeToString(h.Sum(nil))
}

// Result is a finished build.
type Result struct {
	// Artifact is the reference instances are started from; only the runtime
	// executor of the same mode interprets it (a directory in the embedded
	// mode, an image reference in the cluster mode).
	Artifact string
	// Log is the build's output (dependency installation), at most LogLimit
	// bytes, keeping the end.
	Log string
	// Reused reports that an existing artifact was found and nothing was built.
	Reused bool
}

// LogLimit caps Result.Log and Error.Log.
const LogLimit = 64 << 10

// Builder builds artifacts in the background: no caller ever waits for a
// build, so that a build of any length holds no reconcile worker. A build
// belongs to one function (Request.Namespace and Function): a function has
// at most one build at a time. Implementations are safe for concurrent use.
type Builder interface {
	// Build reports the function's build of req, starting it unless one of
	// req.Key() runs or has ended: a build of another key for the function
	// is cancelled first, and its result is never reported. Build never
	// waits for the build. While it runs, the Progress is not Done; once it
	// ended, Build reports it Done with its Result or its failure (a *Error
	// when the code is at fault), and may then forget it, so that asking
	// again may build again (cheaply: Result.Reused).
	//
	// notify, when not nil, is called once, on another goroutine, when the
	// build ends, so that the caller reads the result then instead of
	// polling; it replaces the notify of earlier calls for the function. A
	// builder whose builds end elsewhere may not notify; callers also poll.
	//
	// err is a failure to start or to check the build (the caller retries),
	// never the build's own failure.
	Build(ctx context.Context, req Request, notify func()) (Progress, error)
	// Cancel stops the function's build, if any, and forgets it. Cancelling
	// a function without a build does nothing.
	Cancel(ctx context.Context, namespace, function string) error
}

// Progress is the state of one build.
type Progress struct {
	// Done reports that the build ended, with Result or Err.
	Done bool
	// Result is the successful build's.
	Result Result
	// Err is why the build failed: a *Error for the code's fault, anything
	// else for the server's.
	Err error
	// Started is when the running build started, zero when the builder
	// does not know (or once Done).
	Started time.Time
}

// Pruner is implemented by builders whose artifacts can be listed and
// removed, so that the artifacts no function uses stop taking space. Removing
// one costs a rebuild if its code is deployed again; it never loses code.
// Its methods are safe to call while builds run: such a builder records when
// a build last produced or reused each artifact.
type Pruner interface {
	// Artifacts returns every artifact the builder keeps, in the form
	// Result.Artifact has, so that they compare with what functions record.
	Artifacts(ctx context.Context) ([]string, error)
	// RemoveUnused removes artifact unless a build produced or reused it at
	// or after since, the time the caller first saw no function use it: that
	// build's function may be about to use it. It reports whether it removed
	// it.
	RemoveUnused(ctx context.Context, artifact string, since time.Time) (bool, error)
}

// Error is a build failure caused by the code or its dependencies, with a
// message for the user and the build output. Errors of any other type are
// infrastructure failures whose details belong in the server log only.
type Error struct {
	// Msg is a message the user can act on.
	Msg string
	// Log is the build output, at most LogLimit bytes.
	Log string
	// Err is the underlying cause, for errors.Is/As and server logs.
	Err error
}

func (e *Error) Error() string { return e.Msg }

func (e *Error) Unwrap() error { return e.Err }

// AsError returns err as a *Error if it is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// Observer is told about every build's end, for metrics and traces.
// Implementations are safe for concurrent use and return quickly.
type Observer interface {
	// BuildEnded reports that req's build, started at start, took took and
	// gave res, or err (a context error when it was cancelled).
	BuildEnded(req Request, start time.Time, took time.Duration, res Result, err error)
	// Forget reports that the function is gone: what is kept about it
	// (metric series) goes.
	Forget(namespace, function string)
}

// Observers tell each of their members.
type Observers []Observer

// BuildEnded implements Observer.
func (os Observers) BuildEnded(req Request, start time.Time, took time.Duration, res Result, err error) {
	for _, o := range os {
		o.BuildEnded(req, start, took, res, err)
	}
}

// Forget implements Observer.
func (os Observers) Forget(namespace, function string) {
	for _, o := range os {
		o.Forget(namespace, function)
	}
}
