// Package storage holds the storage contracts shared by all modules: the
// content-addressed Blobs store for uploaded code. The relational database is
// provided by package sqldb; implementations of Blobs live in blobfs and blobs3.
package storage

import (
	"context"
	"errors"
	"io"
)

// ErrNotFound is returned (wrapped) when a blob does not exist.
var ErrNotFound = errors.New("blob not found")

// Blob identifies stored content.
type Blob struct {
	// SHA256 is the lower-case hex SHA-256 of the content; it is the blob's key.
	SHA256 string `json:"sha256"`
	// Size is the content length in bytes.
	Size int64 `json:"size"`
}

// Blobs is a content-addressed store of immutable byte blobs: a blob's key is
// the SHA-256 of its content.
//
// Implementations are safe for concurrent use. Put is atomic (a reader never
// sees a partial blob, a failed Put stores nothing) and idempotent (putting the
// same content twice stores it once). Delete is idempotent.
type Blobs interface {
	// Put reads r to EOF, stores the content and returns its key and size.
	Put(ctx context.Context, r io.Reader) (Blob, error)
	// Open returns the content of the blob with the given key, or an error
	// wrapping ErrNotFound. The caller closes the reader.
	Open(ctx context.Context, sha256 string) (io.ReadCloser, error)
	// Stat returns the blob's metadata, or an error wrapping ErrNotFound.
	Stat(ctx context.Context, sha256 string) (Blob, error)
	// Delete removes the blob; deleting a missing blob is not an error.
	Delete(ctx context.Context, sha256 string) error
}
