package crane

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"sless.kube5s.ru/sless/modules/build/imagecode"
)

// layerInfo is what an image's manifest and config say about a gzipped
// layer.
type layerInfo struct {
	Digest v1.Hash `json:"digest"` // of the gzipped bytes
	DiffID v1.Hash `json:"diff_id"`
	Size   int64   `json:"size"`
}

// writeLayer writes the gzipped tar of the tree at root to w, its entries
// named below name ("code/.deps/..."), as imagecode.WriteTree writes them.
func writeLayer(w io.Writer, root, name string) (layerInfo, error) {
	digest, size := sha256.New(), &counter{}
	gz, err := gzip.NewWriterLevel(io.MultiWriter(w, digest, size), gzip.BestSpeed)
	if err != nil {
		return layerInfo{}, err
	}
	diffID := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(gz, diffID))
	err = imagecode.WriteTree(tw, root, name)
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = gz.Close()
	}
	if err != nil {
		return layerInfo{}, err
	}
	return layerInfo{Digest: hashOf(digest), DiffID: hashOf(diffID), Size: size.n}, nil
}

func hashOf(h hash.Hash) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", h.Sum(nil))}
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// layer is a gzipped layer whose digests are known, so that neither pushing
// it nor appending it to an image reads it again; pushing skips it when the
// registry has it.
type layer struct {
	info      layerInfo
	mediaType types.MediaType
	open      func() (io.ReadCloser, error)
}

var _ v1.Layer = (*layer)(nil)

func (l *layer) Digest() (v1.Hash, error)            { return l.info.Digest, nil }
func (l *layer) DiffID() (v1.Hash, error)            { return l.info.DiffID, nil }
func (l *layer) Size() (int64, error)                { return l.info.Size, nil }
func (l *layer) MediaType() (types.MediaType, error) { return l.mediaType, nil }
func (l *layer) Compressed() (io.ReadCloser, error)  { return l.open() }

func (l *layer) Uncompressed() (io.ReadCloser, error) {
	rc, err := l.open()
	if err != nil {
		return nil, err
	}
	gz, err := gzip.NewReader(rc)
	if err != nil {
		rc.Close()
		return nil, err
	}
	return readCloser{gz, func() error { return errors.Join(gz.Close(), rc.Close()) }}, nil
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }
