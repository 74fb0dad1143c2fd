// Package blobfs is a storage.Blobs on a local filesystem.
//
// Layout under the root directory:
//
//	sha256/ab/abcdef…  one file per blob, named by its key, fanned out by the
//	                   key's first two hex digits so no directory grows past
//	                   1/256 of the blobs
//	tmp/put-*          uploads in progress; renamed into sha256/ when complete
//
// tmp/ sits inside the root so that the final rename stays on one filesystem
// and is therefore atomic: readers see a complete blob or none.
package blobfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"sless.kube5s.ru/sless/internal/durable"
	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/storage/internal/cas"
)

// staleTempAge is how long a temporary file must have been left untouched
// before New deletes it as the leftover of a crashed process. An upload in
// progress writes its temp file continuously, so an hour of silence means no
// one owns it.
const staleTempAge = time.Hour

// Store is a storage.Blobs keeping each blob in one file. It is safe for
// concurrent use, also by several processes sharing the directory.
//
// Cost: Put writes the content once, fsyncs it and renames it (plus a
// directory fsync); Open and Stat are one open/stat syscall; Delete is one
// unlink.
type Store struct {
	blobs string // root/sha256
	tmp   string // root/tmp
}

var _ storage.Blobs = (*Store)(nil)

// New returns a Store rooted at dir, creating the directory tree if needed and
// removing temporary files that crashed uploads left behind.
func New(dir string) (*Store, error) {
	s := &Store{blobs: filepath.Join(dir, "sha256"), tmp: filepath.Join(dir, "tmp")}
	for _, d := range []string{s.blobs, s.tmp} {
		// Uploaded code is its owner's: only the server reads it.
		if err := durable.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("blobfs: create %s: %w", d, err)
		}
	}
	if err := removeStaleTemps(s.tmp, time.Now().Add(-staleTempAge)); err != nil {
		return nil, fmt.Errorf("blobfs: clean %s: %w", s.tmp, err)
	}
	return s, nil
}

// removeStaleTemps deletes the files in dir last modified before cutoff.
func removeStaleTemps(dir string, cutoff time.Time) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // finished or removed meanwhile
		}
		if err != nil {
			return err
		}
		if info.ModTime().Before(cutoff) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// Put stores the content of r; see storage.Blobs.
func (s *Store) Put(ctx context.Context, r io.Reader) (storage.Blob, error) {
	f, b, err := cas.Spool(ctx, s.tmp, r)
	if err != nil {
		return storage.Blob{}, fmt.Errorf("blobfs: put: %w", err)
	}
	if err := s.commit(f, b.SHA256); err != nil {
		return storage.Blob{}, fmt.Errorf("blobfs: put %s: %w", b.SHA256, err)
	}
	return b, nil
}

// commit makes the spooled file f durable and moves it to the blob's path, or
// removes it when the blob is already there. f is closed and gone from tmp/
// afterwards, whatever the outcome.
func (s *Store) commit(f *os.File, key string) (err error) {
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	// Sync before rename: otherwise a crash can leave a renamed but empty or
	// partial file, which would then be served under the hash of the full
	// content.
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	final := s.path(key)
	if _, err := os.Stat(final); err == nil {
		// Same key, same content: keep the existing file.
		if err := os.Remove(tmp); err != nil {
			return fmt.Errorf("remove duplicate %s: %w", tmp, err)
		}
		return nil
	}
	// Blobs are immutable; read-only files make that visible to operators.
	if err := os.Chmod(tmp, 0o400); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	dir := filepath.Dir(final)
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	// A concurrent Put of the same content may rename first; rename then
	// atomically replaces identical bytes, which readers cannot tell apart.
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("rename into place: %w", err)
	}
	return durable.SyncDir(dir)
}

// Open returns the blob's content; see storage.Blobs. The reader is an
// *os.File, so it also supports Seek and ReadAt.
func (s *Store) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := s.check(ctx, key); err != nil {
		return nil, fmt.Errorf("blobfs: open: %w", err)
	}
	f, err := os.Open(s.path(key))
	if err != nil {
		return nil, fmt.Errorf("blobfs: open %s: %w", key, notFound(err))
	}
	return f, nil
}

// Stat returns the blob's metadata; see storage.Blobs.
func (s *Store) Stat(ctx context.Context, key string) (storage.Blob, error) {
	if err := s.check(ctx, key); err != nil {
		return storage.Blob{}, fmt.Errorf("blobfs: stat: %w", err)
	}
	info, err := os.Stat(s.path(key))
	if err != nil {
		return storage.Blob{}, fmt.Errorf("blobfs: stat %s: %w", key, notFound(err))
	}
	return storage.Blob{SHA256: key, Size: info.Size()}, nil
}

// Delete removes the blob; see storage.Blobs. Fan-out directories stay: there
// are at most 256 of them, and removing one could race with a Put about to
// rename into it.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.check(ctx, key); err != nil {
		return fmt.Errorf("blobfs: delete: %w", err)
	}
	if err := os.Remove(s.path(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blobfs: delete %s: %w", key, err)
	}
	return nil
}

// check validates a request before it touches the filesystem.
func (s *Store) check(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return cas.CheckKey(key)
}

// path returns the file of a valid key.
func (s *Store) path(key string) string {
	return filepath.Join(s.blobs, key[:2], key)
}

// notFound marks a missing file as storage.ErrNotFound, keeping the cause.
func notFound(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", storage.ErrNotFound, err)
	}
	return err
}
