package client

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"sless.kube5s.ru/sless/modules/build/safezip"
)

// zipEpoch is the modification time of every entry: the earliest a zip can
// record, so that timestamps never change the archive's bytes.
var zipEpoch = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// ZipDir zips the directory tree at dir for upload and returns the archive
// with the lower-case hex SHA-256 of its bytes.
//
// The archive is deterministic: the same tree gives the same bytes (and
// hash), whatever the files' timestamps, owners or order on disk. Entries
// appear depth-first in lexical order of names, with a fixed modification
// time; files get mode 0644, or 0755 if any execute bit is set; directories
// 0755. The bytes can still change across Go versions if compress/flate's
// output does.
//
// Paths listed in a .slessignore file at the root of dir are left out, as are
// .git directories and .slessignore itself. The syntax is that of .gitignore:
// one pattern per line, "#" comments, "!" to re-include, a trailing "/" to
// match directories only, a "/" elsewhere to anchor the pattern to the root
// (otherwise it matches at any depth), wildcards "*", "?", "[...]" and "**"
// for any number of directories. As with git, nothing inside an excluded
// directory can be re-included.
//
// Symbolic links are stored as links, rewritten relative to their own
// directory, if they resolve to something uploaded; links that point outside
// dir, to something left out or nowhere are an error, as are other special
// files. ZipDir applies the server's default limits (safezip.DefaultLimits)
// and rules (safezip.Check) so that a tree the server would refuse fails
// before it is uploaded.
func ZipDir(dir string) (data []byte, sha256hex string, err error) {
	return zipDir(dir, safezip.DefaultLimits())
}

// zipDir is ZipDir with explicit limits; every field of lim must be set.
func zipDir(dir string, lim safezip.Limits) ([]byte, string, error) {
	entries, err := collect(dir, lim)
	if err != nil {
		return nil, "", err
	}
	data, err := writeZip(entries, lim)
	if err != nil {
		return nil, "", fmt.Errorf("zipping %s: %w", dir, err)
	}
	// The server applies exactly these rules; checking here reports names
	// it would refuse (a backslash in a file name, say) before uploading.
	if err := safezip.Check(bytes.NewReader(data), int64(len(data)), lim); err != nil {
		return nil, "", fmt.Errorf("%s cannot be uploaded: %w", dir, err)
	}
	sum := sha256.Sum256(data)
	return data, hex.EncodeToString(sum[:]), nil
}

// zipSource is one entry to zip.
type zipSource struct {
	name   string      // slash-separated path relative to the root
	path   string      // path on disk, under dir as the caller named it
	mode   fs.FileMode // type and normalised permissions
	target string      // for symbolic links: slash-separated, relative
}

// collect walks dir and returns what to upload, in lexical order, enforcing
// the entry and size limits before anything is read.
func collect(dir string, lim safezip.Limits) ([]zipSource, error) {
	// Resolve dir itself so that a symlinked DIR works and link targets can
	// be compared with it.
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	if info, err := os.Stat(root); err != nil {
		return nil, err
	} else if !info.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	rules, err := loadIgnore(root)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	c := collector{dir: dir, root: root, rules: rules, lim: lim, included: map[string]bool{"": true}}
	if err := filepath.WalkDir(root, c.visit); err != nil {
		return nil, err
	}
	if c.files == 0 {
		return nil, fmt.Errorf("nothing to upload in %s", dir)
	}
	if err := c.checkLinks(); err != nil {
		return nil, err
	}
	return c.entries, nil
}

func loadIgnore(root string) (ignoreRules, error) {
	f, err := os.Open(filepath.Join(root, ignoreFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseIgnore(f)
}

type collector struct {
	dir      string // as the caller named it, for messages
	root     string // dir with symbolic links resolved
	rules    ignoreRules
	lim      safezip.Limits
	entries  []zipSource
	included map[string]bool // names of entries, "" for the root
	files    int             // regular files and links
	size     int64           // total size of regular files
}

func (c *collector) visit(p string, d fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	if p == c.root {
		return nil
	}
	rel, err := filepath.Rel(c.root, p)
	if err != nil {
		return err
	}
	name := filepath.ToSlash(rel)
	if c.excluded(name, d) {
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	}
	if len(c.entries) == c.lim.MaxEntries {
		return fmt.Errorf("%s holds more than %d files and directories to upload, the limit; list what the function does not need in %s",
			c.dir, c.lim.MaxEntries, ignoreFile)
	}
	s, err := c.source(p, name, d)
	if err != nil {
		return err
	}
	c.entries = append(c.entries, s)
	c.included[name] = true
	return nil
}

// excluded reports whether name is left out: .git anywhere (its contents are
// never function code), the ignore file itself, and what the rules exclude.
func (c *collector) excluded(name string, d fs.DirEntry) bool {
	return d.Name() == ".git" || name == ignoreFile || c.rules.ignored(name, d.IsDir())
}

func (c *collector) source(p, name string, d fs.DirEntry) (zipSource, error) {
	switch t := d.Type(); {
	case t.IsDir():
		return zipSource{name: name + "/", path: c.display(name), mode: fs.ModeDir | 0o755}, nil
	case t == fs.ModeSymlink:
		target, err := c.linkTarget(p, name)
		if err != nil {
			return zipSource{}, err
		}
		c.files++
		return zipSource{name: name, path: c.display(name), mode: fs.ModeSymlink | 0o777, target: target}, nil
	case t.IsRegular():
		info, err := d.Info()
		if err != nil {
			return zipSource{}, err
		}
		c.size += info.Size()
		if c.size > c.lim.MaxExtractedBytes {
			return zipSource{}, c.sizeError()
		}
		c.files++
		mode := fs.FileMode(0o644)
		if info.Mode()&0o111 != 0 {
			mode = 0o755
		}
		return zipSource{name: name, path: c.display(name), mode: mode}, nil
	default:
		return zipSource{}, fmt.Errorf("%s: cannot upload a %s; remove it or list it in %s",
			c.display(name), typeName(t), ignoreFile)
	}
}

func (c *collector) sizeError() error {
	return fmt.Errorf("files in %s add up to more than %s, the limit for uploads; list what the function does not need in %s",
		c.dir, formatLimit(c.lim.MaxExtractedBytes), ignoreFile)
}

func typeName(t fs.FileMode) string {
	switch {
	case t&fs.ModeNamedPipe != 0:
		return "named pipe"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeDevice != 0:
		return "device"
	default:
		return fmt.Sprintf("special file (mode %v)", t)
	}
}

// linkTarget resolves the link at p and returns where it leads relative to
// its own directory. Storing the resolved target rather than what the link
// says turns absolute links into relative ones and collapses chains, so the
// server's rules (relative targets, ".." only at the start) always hold.
func (c *collector) linkTarget(p, name string) (string, error) {
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("symbolic link %s is broken: %w", c.display(name), err)
	}
	rel, err := filepath.Rel(c.root, resolved)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("symbolic link %s points outside %s (to %s); copy what it points to into %s instead",
			c.display(name), c.dir, resolved, c.dir)
	}
	// WalkDir does not follow links, so the link's directory is a real
	// directory under root and Rel from it matches what the kernel resolves.
	target, err := filepath.Rel(filepath.Dir(p), resolved)
	if err != nil {
		return "", err
	}
	return filepath.ToSlash(target), nil
}

// checkLinks refuses links to paths that are not uploaded: they would
// dangle on the server.
func (c *collector) checkLinks() error {
	for _, s := range c.entries {
		if s.mode.Type() != fs.ModeSymlink {
			continue
		}
		to := path.Join(path.Dir(s.name), s.target)
		if to == "." {
			to = ""
		}
		if !c.included[to] {
			return fmt.Errorf("symbolic link %s points to %s, which is not uploaded (excluded by %s or .git)",
				c.display(s.name), c.display(to), ignoreFile)
		}
	}
	return nil
}

func (c *collector) display(name string) string {
	return filepath.Join(c.dir, filepath.FromSlash(name))
}

// writeZip builds the archive. Regular files are read here, and counted
// again in case they grew since collect looked at them.
func writeZip(entries []zipSource, lim safezip.Limits) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	left := lim.MaxExtractedBytes
	for _, s := range entries {
		n, err := addEntry(zw, s, left)
		if err != nil {
			return nil, err
		}
		if n > left {
			return nil, fmt.Errorf("%s grew while being zipped: the files now add up to more than %s, the limit for uploads",
				s.path, formatLimit(lim.MaxExtractedBytes))
		}
		left -= n
		// Stop early rather than compress hundreds of MiB that would be
		// refused. The count lags by the entry still being compressed;
		// safezip.Check enforces the exact size afterwards.
		if err := zw.Flush(); err != nil {
			return nil, err
		}
		if int64(buf.Len()) > lim.MaxCompressedBytes {
			return nil, fmt.Errorf("the archive is larger than %s, the limit for uploads; list what the function does not need in %s",
				formatLimit(lim.MaxCompressedBytes), ignoreFile)
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// addEntry writes s to zw and, for a regular file, returns the number of
// bytes copied, reading at most left+1.
func addEntry(zw *zip.Writer, s zipSource, left int64) (int64, error) {
	fh := &zip.FileHeader{Name: s.name, Method: zip.Deflate, Modified: zipEpoch}
	if s.mode.IsDir() {
		fh.Method = zip.Store
	}
	fh.SetMode(s.mode)
	w, err := zw.CreateHeader(fh)
	if err != nil {
		return 0, err
	}
	switch s.mode.Type() {
	case fs.ModeDir:
		return 0, nil
	case fs.ModeSymlink:
		_, err := io.WriteString(w, s.target)
		return 0, err
	}
	f, err := os.Open(s.path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := io.Copy(w, io.LimitReader(f, left+1))
	if err != nil {
		return n, fmt.Errorf("reading %s: %w", s.path, err)
	}
	return n, nil
}

// formatLimit renders a byte limit, in MiB when it is a whole number of them.
func formatLimit(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
