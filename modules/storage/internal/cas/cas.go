// Package cas holds the pieces shared by the content-addressed Blobs
// implementations: key validation and spooling a reader to a temporary file
// while hashing it.
package cas

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"sless.kube5s.ru/sless/modules/storage"
)

// keyLen is the length of a blob key: a hex-encoded SHA-256.
const keyLen = 2 * sha256.Size

// ErrInvalidKey is returned (wrapped) for a key that is not 64 lower-case hex
// digits. Implementations check keys before touching storage, so a key can
// never name anything outside the store (no "..", no separators).
var ErrInvalidKey = errors.New("invalid blob key: want 64 lower-case hex digits")

// CheckKey returns an error wrapping ErrInvalidKey unless key is 64
// lower-case hex digits. The bad key is not echoed: it is caller input of any
// length.
func CheckKey(key string) error {
	if len(key) != keyLen {
		return fmt.Errorf("%w (got %d bytes)", ErrInvalidKey, len(key))
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("%w (byte %d is %q)", ErrInvalidKey, i, c)
		}
	}
	return nil
}

// Spool copies r to a new temporary file in dir while hashing it and returns
// the file, positioned at its end, with the blob's key and size. The caller
// owns the file: it closes and removes (or renames) it. On error nothing is
// left behind.
//
// Spool checks ctx before every read, so a cancelled Put stops within one
// read of r; a read that blocks forever is not interrupted (the caller's
// reader should honour the same ctx, as an HTTP request body does).
func Spool(ctx context.Context, dir string, r io.Reader) (*os.File, storage.Blob, error) {
	if err := ctx.Err(); err != nil {
		return nil, storage.Blob{}, err
	}
	f, err := os.CreateTemp(dir, "put-*")
	if err != nil {
		return nil, storage.Blob{}, fmt.Errorf("create temporary file: %w", err)
	}
	h := sha256.New()
	buf := spoolBuffers.Get().(*[]byte)
	n, err := io.CopyBuffer(io.MultiWriter(f, h), ctxReader{ctx, r}, *buf)
	spoolBuffers.Put(buf)
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, storage.Blob{}, fmt.Errorf("copy content to %s: %w", f.Name(), err)
	}
	return f, storage.Blob{SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}, nil
}

// spoolBuffers holds Spool's copy buffers. Their size trades syscalls
// against memory: 256 KiB keeps a 20 MiB upload at under a hundred writes.
// Reused, because making (and zeroing) one per upload cost 2.4 % of the
// server's CPU during a deploy of many small functions.
var spoolBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// ctxReader fails reads once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
