// Package unzip extracts a function's uploaded code for a builder: the blob
// read as a local file (a zip needs random access) and unpacked with
// safezip, its refusals turned into build errors for the user.
package unzip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/storage"
)

// Blobs opens uploaded code by its SHA-256; storage.Blobs implements it.
type Blobs interface {
	Open(ctx context.Context, sha256 string) (io.ReadCloser, error)
}

// Code extracts the code blob sha into dir, an empty directory. A blob that
// is a local file (blobfs) is read in place; any other is first copied to
// the file copy, removed afterwards. A missing blob or an archive that
// safezip refuses is a *build.Error; a failure of the disk or the blob store
// is not (its message names the server's paths).
func Code(ctx context.Context, blobs Blobs, sha, dir, copy string, lim safezip.Limits) error {
	src, err := blobs.Open(ctx, sha)
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return &build.Error{Msg: fmt.Sprintf("the uploaded code %s is missing from the blob store; upload it again", sha), Err: err}
		}
		return fmt.Errorf("opening code %s: %w", sha, err)
	}
	defer src.Close()
	zr, size, closeCopy, err := randomAccess(src, copy)
	if err != nil {
		return fmt.Errorf("copying code %s: %w", sha, err)
	}
	defer closeCopy()
	err = safezip.Extract(zr, size, dir, lim)
	if e, ok := errors.AsType[*safezip.Error](err); ok {
		return &build.Error{Msg: e.Error(), Err: err}
	}
	if err != nil {
		return fmt.Errorf("extracting code %s: %w", sha, err)
	}
	return nil
}

// randomAccess returns src as a ReaderAt with its size: src itself when it
// is a local file, else a copy written to the file copy, which closeCopy
// closes and removes. Reading a blobfs blob in place spares every build a
// file written and deleted.
func randomAccess(src io.Reader, copy string) (r io.ReaderAt, size int64, closeCopy func(), err error) {
	if f, ok := src.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			return f, st.Size(), func() {}, nil
		}
	}
	f, err := os.Create(copy)
	if err != nil {
		return nil, 0, nil, err
	}
	if size, err = io.Copy(f, src); err != nil {
		f.Close()
		os.Remove(copy)
		return nil, 0, nil, err
	}
	return f, size, func() { f.Close(); os.Remove(copy) }, nil
}
