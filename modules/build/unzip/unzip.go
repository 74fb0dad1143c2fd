// Package unzip extracts a function's uploaded code for a builder: the blob
// copied to a local file (a zip needs random access) and unpacked with
// safezip, its refusals turned into build errors for the user.
package unzip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/storage"
)

// Blobs opens uploaded code by its SHA-256; storage.Blobs implements it.
type Blobs interface {
	Open(ctx context.Context, sha256 string) (io.ReadCloser, error)
}

// Code extracts the code blob sha into work/code and returns that
// directory; the zip is kept as work/code.zip. A missing blob or an archive
// that safezip refuses is a *build.Error; a failure of the disk or the blob
// store is not (its message names the server's paths).
func Code(ctx context.Context, blobs Blobs, sha, work string, lim safezip.Limits) (string, error) {
	dir := filepath.Join(work, "code")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	src, err := blobs.Open(ctx, sha)
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return "", &build.Error{Msg: fmt.Sprintf("the uploaded code %s is missing from the blob store; upload it again", sha), Err: err}
		}
		return "", fmt.Errorf("opening code %s: %w", sha, err)
	}
	defer src.Close()
	f, err := os.Create(filepath.Join(work, "code.zip"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	size, err := io.Copy(f, src)
	if err != nil {
		return "", fmt.Errorf("copying code %s: %w", sha, err)
	}
	err = safezip.Extract(f, size, dir, lim)
	if e, ok := errors.AsType[*safezip.Error](err); ok {
		return "", &build.Error{Msg: e.Error(), Err: err}
	}
	if err != nil {
		return "", fmt.Errorf("extracting code %s: %w", sha, err)
	}
	return dir, nil
}
