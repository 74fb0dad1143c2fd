package crane

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"sless.kube5s.ru/sless/modules/build"
)

// epoch is every entry's modification time: a layer depends on its content
// only.
var epoch = time.Unix(0, 0)

// layerInfo is what an image's manifest and config say about a gzipped
// layer.
type layerInfo struct {
	Digest v1.Hash `json:"digest"` // of the gzipped bytes
	DiffID v1.Hash `json:"diff_id"`
	Size   int64   `json:"size"`
}

// writeLayer writes the gzipped tar of the tree at root to w, its entries
// named below name ("code/.deps/..."), preceded by name's parent directories.
// The tar is deterministic: entries in lexical order, owned by root,
// modification time epoch, directories 0755 and files 0644, or 0755 when any
// execute bit is set, symbolic links kept. A name that a container runtime
// would take for a whiteout (".wh.") is refused with a *build.Error.
func writeLayer(w io.Writer, root, name string) (layerInfo, error) {
	digest, size := sha256.New(), &counter{}
	gz, err := gzip.NewWriterLevel(io.MultiWriter(w, digest, size), gzip.BestSpeed)
	if err != nil {
		return layerInfo{}, err
	}
	diffID := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(gz, diffID))
	var parents []string
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		parents = append([]string{dir}, parents...)
	}
	for _, dir := range parents {
		if err := tw.WriteHeader(dirHeader(dir)); err != nil {
			return layerInfo{}, err
		}
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		entry := path.Join(name, filepath.ToSlash(rel))
		if strings.HasPrefix(d.Name(), ".wh.") {
			return &build.Error{Msg: fmt.Sprintf("%q: names starting with .wh. cannot be in an image", strings.TrimPrefix(entry, "code/"))}
		}
		return writeEntry(tw, p, entry, d)
	})
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

func writeEntry(tw *tar.Writer, p, entry string, d fs.DirEntry) error {
	switch t := d.Type(); {
	case t.IsDir():
		return tw.WriteHeader(dirHeader(entry))
	case t&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: entry, Linkname: target,
			Mode: 0o777, ModTime: epoch, Format: tar.FormatPAX})
	case t.IsRegular():
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		mode := int64(0o644)
		if st.Mode()&0o111 != 0 {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: entry, Size: st.Size(),
			Mode: mode, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		n, err := io.Copy(tw, f)
		if err == nil && n != st.Size() {
			err = fmt.Errorf("%s changed while it was archived", p)
		}
		return err
	default:
		return fmt.Errorf("%s: cannot archive a %s", p, t)
	}
}

func dirHeader(name string) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}
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
