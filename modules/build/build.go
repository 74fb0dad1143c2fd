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

// Builder builds artifacts.
//
// Build blocks until the artifact exists or the build failed, honouring ctx.
// It is idempotent: a request whose artifact exists returns it with Reused
// set, and concurrent requests for the same artifact build it once.
// Implementations are safe for concurrent use.
type Builder interface {
	Build(ctx context.Context, req Request) (Result, error)
}

// Pruner is implemented by builders whose artifacts can be listed and
// removed, so that the artifacts no function uses stop taking space. Removing
// one costs a rebuild if its code is deployed again; it never loses code.
// Its methods are safe to call while builds run: such a builder records when
// Build last returned each artifact.
type Pruner interface {
	// Artifacts returns every artifact the builder keeps, in the form
	// Result.Artifact has, so that they compare with what functions record.
	Artifacts(ctx context.Context) ([]string, error)
	// RemoveUnused removes artifact unless a Build returned it at or after
	// since, the time the caller first saw no function use it: such a Build's
	// caller may be about to use it. It reports whether it removed it.
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
