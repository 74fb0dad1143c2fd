// Package imagecode is what the image builders share about a function's
// code: the deterministic tar of a tree (a crane layer, a kaniko build
// context) and whether the code needs a dependency install.
package imagecode

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/runtime"
)

// Labels of every image the image builders make: what it was made of.
const (
	LabelRuntime    = "ru.kube5s.sless.runtime"
	LabelHandler    = "ru.kube5s.sless.handler"
	LabelCodeSHA256 = "ru.kube5s.sless.code-sha256"
)

// Epoch is every entry's modification time: an archive depends on its
// content only.
var Epoch = time.Unix(0, 0)

// WriteTree adds the tree at root to tw, its entries named below name
// ("code/.deps/..."), preceded by name's parent directories. The entries
// are deterministic: in lexical order, owned by root, modification time
// Epoch, directories 0755 and files 0644, or 0755 when any execute bit is
// set, symbolic links kept. A name that a container runtime would take for
// a whiteout (".wh.") is refused with a *build.Error, since the tree ends up
// in an image layer.
func WriteTree(tw *tar.Writer, root, name string) error {
	var parents []string
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		parents = append([]string{dir}, parents...)
	}
	for _, dir := range parents {
		if err := tw.WriteHeader(dirHeader(dir)); err != nil {
			return err
		}
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
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
}

// WriteFile adds a regular file with data to tw, as WriteTree adds one:
// owned by root, modification time Epoch, mode 0644.
func WriteFile(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(data)),
		Mode: 0o644, ModTime: Epoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
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
			Mode: 0o777, ModTime: Epoch, Format: tar.FormatPAX})
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
			Mode: mode, ModTime: Epoch, Format: tar.FormatPAX}); err != nil {
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
	return &tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: Epoch, Format: tar.FormatPAX}
}

// NeedsInstall reports whether the code at dir declares dependencies (has
// the layout's first dependency file) and vendors none (has no DepsDir of
// its own, which then stays with the code).
func NeedsInstall(dir string, l runtime.ImageLayout) bool {
	if _, err := os.Stat(filepath.Join(dir, l.DependencyFiles[0])); err != nil {
		return false
	}
	_, err := os.Lstat(filepath.Join(dir, l.DepsDir))
	return errors.Is(err, os.ErrNotExist)
}
