package safezip

import (
	"archive/zip"
	"fmt"
	"io"
	"os"
)

// writer creates a planned tree, counting the bytes it writes.
type writer struct {
	left  int64 // bytes that may still be written
	limit int64 // MaxExtractedBytes, for messages
}

// dir creates the children of n inside the directory r. Every operation names
// a single component relative to an open directory, so the cost does not grow
// with depth and nothing is resolved through a path another entry created.
// Links come after everything else in the directory; no entry lives beneath a
// link, so none is written through one.
func (w *writer) dir(r *os.Root, n *node) error {
	var links []*node
	for _, c := range n.children {
		var err error
		switch c.kind {
		case kindDir:
			err = w.subdir(r, c)
		case kindFile:
			err = w.file(r, c)
		case kindLink:
			links = append(links, c)
		}
		if err != nil {
			return err
		}
	}
	for _, l := range links {
		if err := r.Symlink(l.target, l.name); err != nil {
			return fmt.Errorf("safezip: %w", err)
		}
	}
	return nil
}

func (w *writer) subdir(r *os.Root, n *node) error {
	if err := r.Mkdir(n.name, 0o755); err != nil {
		return fmt.Errorf("safezip: %w", err)
	}
	// Mkdir's mode is subject to the umask; the tree must be exactly as
	// documented whoever reads it later.
	if err := r.Chmod(n.name, 0o755); err != nil {
		return fmt.Errorf("safezip: %w", err)
	}
	sub, err := r.OpenRoot(n.name)
	if err != nil {
		return fmt.Errorf("safezip: %w", err)
	}
	defer sub.Close()
	return w.dir(sub, n)
}

func (w *writer) file(r *os.Root, n *node) error {
	// O_EXCL: never reuse (or write through) anything already there.
	dst, err := r.OpenFile(n.name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, n.mode)
	if err != nil {
		return fmt.Errorf("safezip: %w", err)
	}
	written, err := copyEntry(dst, n.zf, w.left, w.limit)
	w.left -= written
	if err == nil {
		// As for directories: do not let the umask decide.
		err = dst.Chmod(n.mode)
	}
	if cerr := dst.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("safezip: %w", cerr)
	}
	return err
}

// copyContent copies the decompressed content of zf from src to dst and
// counts it, so that the limit holds whatever the headers claim: it fails
// once more than left bytes come out.
func copyContent(dst io.Writer, src io.Reader, zf *zip.File, left, limit int64) (int64, error) {
	sr := &sourceReader{r: src}
	n, err := io.Copy(dst, io.LimitReader(sr, left+1))
	switch {
	case sr.err != nil:
		return n, contentError(zf.Name, sr.err)
	case err != nil:
		return n, fmt.Errorf("safezip: writing %q: %w", zf.Name, err)
	case n > left:
		return n, extractedLimit(zf.Name, limit)
	}
	return n, nil
}

// sourceReader remembers read errors so that copyContent can tell a corrupt
// archive from a failing disk.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}
