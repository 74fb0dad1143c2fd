// Package safezip validates and extracts untrusted zip archives: the code
// bundles users upload. It refuses anything that could write outside the
// target directory (absolute paths, "..", escaping symbolic links, writes
// through links), special files, and archives that exceed size or entry-count
// limits, including zip bombs that lie about their sizes.
//
// Errors about the archive itself are *Error values whose text is meant for
// the uploader and names the offending entry or limit; errors.Is tells their
// kind apart (ErrNotZip, ErrUnsafeEntry, ErrLimit).
package safezip

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Kinds of *Error, for use with errors.Is.
var (
	// ErrNotZip marks input that is not a well-formed zip archive we can read:
	// corrupt data, unsupported compression or encryption.
	ErrNotZip = errors.New("not a valid zip archive")
	// ErrUnsafeEntry marks an entry that must not be extracted: a path that
	// escapes the target directory, an escaping symbolic link, a special file,
	// a duplicate or conflicting path.
	ErrUnsafeEntry = errors.New("unsafe zip entry")
	// ErrLimit marks an archive that exceeds one of the Limits.
	ErrLimit = errors.New("zip archive exceeds a limit")
)

// Error describes why an archive was refused.
type Error struct {
	// Kind is ErrNotZip, ErrUnsafeEntry or ErrLimit.
	Kind error
	// Entry is the offending entry's name as stored in the archive, or "" when
	// the problem concerns the archive as a whole.
	Entry string
	// Limit is the name of the Limits field that was exceeded (for example
	// "MaxEntries") when Kind is ErrLimit, and "" otherwise.
	Limit string
	// Reason says what is wrong, phrased for the person who built the archive.
	Reason string
	// Err is the underlying error, if any (for example zip.ErrFormat).
	Err error
}

// Error returns the reason, prefixed with the entry name when there is one.
func (e *Error) Error() string {
	if e.Entry == "" {
		return e.Reason
	}
	return fmt.Sprintf("zip entry %q: %s", e.Entry, e.Reason)
}

// Unwrap returns the kind and the underlying error, so that errors.Is matches
// both.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

func unsafeEntry(entry, format string, args ...any) *Error {
	return &Error{Kind: ErrUnsafeEntry, Entry: entry, Reason: fmt.Sprintf(format, args...)}
}

func corruptEntry(entry string, err error) *Error {
	return &Error{Kind: ErrNotZip, Entry: entry, Reason: "content is corrupt: " + err.Error(), Err: err}
}

func notZip(err error) *Error {
	return &Error{Kind: ErrNotZip, Reason: "upload is not a valid zip archive: " + err.Error(), Err: err}
}

// Limits bound what an archive may hold. Zero or negative fields take the
// defaults.
type Limits struct {
	// MaxCompressedBytes bounds the size of the archive itself
	// (default 50 MiB).
	MaxCompressedBytes int64
	// MaxExtractedBytes bounds the total size of the files and link targets
	// in the archive, both as declared and as actually decompressed
	// (default 250 MiB).
	MaxExtractedBytes int64
	// MaxEntries bounds the number of entries, and the number of files,
	// directories and links extracted, counting directories that are only
	// implied by paths (default 10,000).
	MaxEntries int
}

// DefaultLimits returns the limits used for zero fields of Limits.
func DefaultLimits() Limits {
	return Limits{
		MaxCompressedBytes: 50 << 20,
		MaxExtractedBytes:  250 << 20,
		MaxEntries:         10_000,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxCompressedBytes <= 0 {
		l.MaxCompressedBytes = d.MaxCompressedBytes
	}
	if l.MaxExtractedBytes <= 0 {
		l.MaxExtractedBytes = d.MaxExtractedBytes
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = d.MaxEntries
	}
	return l
}

const (
	// maxNameLen and maxComponentLen are Linux's PATH_MAX and NAME_MAX:
	// longer names could not be created anyway, and checking them up front
	// gives the uploader a clear message instead of an OS error.
	maxNameLen      = 4096
	maxComponentLen = 255
	// maxDepth bounds nesting, far beyond what real code needs: extraction
	// holds a file descriptor per level.
	maxDepth = 128
	// maxLinkTarget bounds a symbolic link's target, which is read into
	// memory before it is validated.
	maxLinkTarget = 4095
)

// Check validates an archive of size bytes read from r without writing
// anything: its size, entry count, entry names and types, symbolic link
// targets, and every file's data, inflated (and discarded) to count its real
// size against MaxExtractedBytes and to compare its size and checksum with
// its header. An archive that passes Check extracts unless the disk fails.
//
// A failure to read r is returned as a plain error wrapping it, not an
// *Error: it is no fault of the archive.
func Check(r io.ReaderAt, size int64, lim Limits) error {
	_, err := Inspect(r, size, lim)
	return err
}

// Inspect checks the archive as Check does and returns what it holds.
func Inspect(r io.ReaderAt, size int64, lim Limits) (*Archive, error) {
	lim = lim.withDefaults()
	ar := &archiveReader{r: r}
	p, err := newPlan(ar, size, lim)
	if err == nil {
		err = p.checkContent(lim)
	}
	if err := ar.failed(err); err != nil {
		return nil, err
	}
	return &Archive{p: p}, nil
}

// Extract validates the archive as Check does and writes it into dir, which
// must exist and be empty. Directories are created with mode 0755; files with
// 0644, or 0755 if any execute bit is set in the archive; other mode bits
// (setuid, sticky, ...) are dropped. The decompressed bytes are counted as they
// are written, whatever the archive declares.
//
// Extract never writes through a symbolic link: no entry may live beneath
// one, and each directory's links are created after everything else in it.
// On error it removes whatever it wrote, leaving dir empty.
func Extract(r io.ReaderAt, size int64, dir string, lim Limits) (err error) {
	lim = lim.withDefaults()
	if err := checkEmptyDir(dir); err != nil {
		return err
	}
	ar := &archiveReader{r: r}
	p, err := newPlan(ar, size, lim)
	if err != nil {
		return ar.failed(err)
	}
	// os.Root is a second line of defence: even if validation missed
	// something, nothing can be created outside dir.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("safezip: %w", err)
	}
	defer root.Close()
	defer func() {
		if err == nil {
			return
		}
		if cerr := emptyDir(dir); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	w := &writer{left: lim.MaxExtractedBytes, limit: lim.MaxExtractedBytes}
	return ar.failed(w.dir(root, &p.root))
}

func checkEmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("safezip: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("safezip: extraction directory %s is not empty", dir)
	}
	return nil
}

// emptyDir removes everything inside dir. RemoveAll does not follow symbolic
// links, so it only ever deletes what Extract created.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("safezip: cleaning up: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("safezip: cleaning up: %w", err))
		}
	}
	return errors.Join(errs...)
}

// entryKind is what an entry becomes on disk.
type entryKind int

const (
	kindDir entryKind = iota
	kindFile
	kindLink
)

func (k entryKind) String() string {
	switch k {
	case kindDir:
		return "directory"
	case kindFile:
		return "file"
	default:
		return "symbolic link"
	}
}

// node is a path the archive creates, explicitly (an entry) or implicitly (a
// parent directory of entries).
type node struct {
	name     string // last path component
	kind     entryKind
	entry    string      // raw name of the entry that created it; "" if implicit
	zf       *zip.File   // files: where the content comes from
	mode     fs.FileMode // files: 0644 or 0755
	target   string      // links
	children []*node     // directories, in archive order
}

// plan is a validated archive: the tree it creates.
type plan struct {
	root     node
	nodes    map[string]*node // by cleaned path
	files    []*node          // in archive order
	maxNodes int
}

func newPlan(r io.ReaderAt, size int64, lim Limits) (*plan, error) {
	if size > lim.MaxCompressedBytes {
		return nil, &Error{Kind: ErrLimit, Limit: "MaxCompressedBytes",
			Reason: fmt.Sprintf("archive is %s; the limit is %s", formatSize(size), formatSize(lim.MaxCompressedBytes))}
	}
	// zip.NewReader allocates a few hundred bytes per central directory
	// entry, so count them first: a 50 MiB directory of tiny entries would
	// otherwise cost hundreds of MiB before the entry limit could be applied.
	n, err := countEntries(r, size)
	if err != nil {
		return nil, notZip(err)
	}
	if err := checkEntryCount(n, lim); err != nil {
		return nil, err
	}
	zr, err := zip.NewReader(r, size)
	// ErrInsecurePath (only under GODEBUG=zipinsecurepath=0) comes with a
	// usable reader; names are validated below anyway.
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return nil, notZip(err)
	}
	if err := checkEntryCount(len(zr.File), lim); err != nil {
		return nil, err
	}
	if err := checkDeclaredSize(zr.File, lim); err != nil {
		return nil, err
	}
	p := &plan{root: node{kind: kindDir}, nodes: make(map[string]*node, len(zr.File)), maxNodes: lim.MaxEntries}
	for _, zf := range zr.File {
		if err := p.add(zf); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func checkEntryCount(n int, lim Limits) error {
	if n <= lim.MaxEntries {
		return nil
	}
	return &Error{Kind: ErrLimit, Limit: "MaxEntries",
		Reason: fmt.Sprintf("archive has %d entries; the limit is %d", n, lim.MaxEntries)}
}

// checkDeclaredSize rejects archives whose headers already admit to being too
// large, before anything is decompressed.
func checkDeclaredSize(files []*zip.File, lim Limits) error {
	var total uint64
	for _, zf := range files {
		total += zf.UncompressedSize64
		if total < zf.UncompressedSize64 || total > uint64(lim.MaxExtractedBytes) {
			return extractedLimit("", lim.MaxExtractedBytes)
		}
	}
	return nil
}

// add validates one entry and records what it creates.
func (p *plan) add(zf *zip.File) error {
	raw := zf.Name
	name, err := cleanName(raw)
	if err != nil {
		return err
	}
	kind, err := entryKindOf(zf)
	if err != nil {
		return err
	}
	if kind != kindDir {
		if err := checkReadable(zf); err != nil {
			return err
		}
	}
	n, err := p.addNode(raw, name, kind)
	if err != nil {
		return err
	}
	switch kind {
	case kindFile:
		n.zf, n.mode = zf, 0o644
		if zf.Mode()&0o111 != 0 {
			n.mode = 0o755
		}
		p.files = append(p.files, n)
	case kindLink:
		target, err := readLinkTarget(zf)
		if err != nil {
			return err
		}
		if err := checkLinkTarget(raw, name, target); err != nil {
			return err
		}
		n.target = target
	}
	return nil
}

// cleanName validates an entry name and returns it cleaned: slash-separated,
// relative, without "." or empty components or a trailing slash.
func cleanName(raw string) (string, error) {
	switch {
	case raw == "":
		return "", unsafeEntry(raw, "an entry has an empty name")
	case len(raw) > maxNameLen:
		return "", unsafeEntry(raw, "name is longer than %d bytes", maxNameLen)
	case strings.ContainsRune(raw, 0):
		return "", unsafeEntry(raw, "name contains a NUL byte")
	case isAbs(raw):
		return "", unsafeEntry(raw, "absolute path")
	case strings.Contains(raw, `\`):
		// Some tools write Windows separators, and some extractors honour
		// them; refusing them keeps "a\..\..\x" from meaning two things.
		return "", unsafeEntry(raw, `name contains a backslash; zip paths must use "/" as the separator`)
	}
	for c := range strings.SplitSeq(raw, "/") {
		if c == ".." {
			// Even a harmless "a/../b" is refused: no archiver writes one.
			if cleaned := path.Clean(raw); cleaned == ".." || strings.HasPrefix(cleaned, "../") {
				return "", unsafeEntry(raw, "path escapes the archive root")
			}
			return "", unsafeEntry(raw, `path contains ".."`)
		}
		if len(c) > maxComponentLen {
			return "", unsafeEntry(raw, "path component is longer than %d bytes", maxComponentLen)
		}
	}
	name := path.Clean(raw)
	if name == "." {
		return "", unsafeEntry(raw, "name refers to the archive root itself")
	}
	if strings.Count(name, "/") >= maxDepth {
		return "", unsafeEntry(raw, "path is nested more than %d levels deep", maxDepth)
	}
	return name, nil
}

// isAbs reports whether name is absolute on Unix or Windows: "/x", "\x",
// "\\host\x" or "C:x".
func isAbs(name string) bool {
	if name[0] == '/' || name[0] == '\\' {
		return true
	}
	return len(name) >= 2 && name[1] == ':' &&
		('a' <= name[0] && name[0] <= 'z' || 'A' <= name[0] && name[0] <= 'Z')
}

func entryKindOf(zf *zip.File) (entryKind, error) {
	mode := zf.Mode()
	switch t := mode.Type(); {
	case t == fs.ModeDir: // also set by archive/zip for names ending in "/"
		return kindDir, nil
	case t == fs.ModeSymlink:
		return kindLink, nil
	case t == 0:
		return kindFile, nil
	default:
		return 0, unsafeEntry(zf.Name, "unsupported file type %s; only files, directories and symbolic links are allowed", typeName(t))
	}
}

func typeName(t fs.FileMode) string {
	switch {
	case t&fs.ModeDir != 0 && t&fs.ModeSymlink != 0:
		return "(both directory and symbolic link)"
	case t&fs.ModeNamedPipe != 0:
		return "(named pipe)"
	case t&fs.ModeSocket != 0:
		return "(socket)"
	case t&fs.ModeCharDevice != 0:
		return "(character device)"
	case t&fs.ModeDevice != 0:
		return "(block device)"
	default:
		return fmt.Sprintf("(mode %v)", t)
	}
}

// checkReadable rejects entries archive/zip could only fail on later, so that
// Check catches them too.
func checkReadable(zf *zip.File) error {
	if zf.Flags&0x1 != 0 {
		return &Error{Kind: ErrNotZip, Entry: zf.Name, Reason: "encrypted entries are not supported"}
	}
	if zf.Method != zip.Store && zf.Method != zip.Deflate {
		return &Error{Kind: ErrNotZip, Entry: zf.Name, Err: zip.ErrAlgorithm,
			Reason: fmt.Sprintf("unsupported compression method %d; use Deflate or Store", zf.Method)}
	}
	return nil
}

// addNode records name and its implicit parent directories, refusing
// duplicates and paths beneath files or links. Rejecting entries beneath a
// link is what keeps a later entry from writing through it.
func (p *plan) addNode(raw, name string, kind entryKind) (*node, error) {
	parent := &p.root
	for i := 0; i < len(name); i++ {
		if name[i] != '/' {
			continue
		}
		dir := name[:i]
		n := p.nodes[dir]
		if n == nil {
			var err error
			if n, err = p.newNode(parent, dir, kindDir, ""); err != nil {
				return nil, err
			}
		} else if n.kind != kindDir {
			return nil, unsafeEntry(raw, "parent %q is a %s in this archive", dir, n.kind)
		}
		parent = n
	}
	n := p.nodes[name]
	switch {
	case n == nil:
		return p.newNode(parent, name, kind, raw)
	case n.entry == raw:
		return nil, unsafeEntry(raw, "duplicate entry")
	case n.entry != "":
		return nil, unsafeEntry(raw, "duplicate entry (same path as %q)", n.entry)
	case kind != kindDir:
		return nil, unsafeEntry(raw, "%s conflicts with directory %q holding earlier entries", kind, name)
	default:
		// An explicit entry for a directory already implied by earlier
		// entries.
		n.entry = raw
		return n, nil
	}
}

// newNode adds the node for pathname under parent. Implied directories count
// against MaxEntries like explicit ones: otherwise an archive of long paths
// could create far more directories than it has entries.
func (p *plan) newNode(parent *node, pathname string, kind entryKind, raw string) (*node, error) {
	if len(p.nodes) == p.maxNodes {
		return nil, &Error{Kind: ErrLimit, Limit: "MaxEntries",
			Reason: fmt.Sprintf("archive creates more than %d files, directories and links (counting directories implied by paths); the limit is %d",
				p.maxNodes, p.maxNodes)}
	}
	n := &node{name: path.Base(pathname), kind: kind, entry: raw}
	parent.children = append(parent.children, n)
	p.nodes[pathname] = n
	return n, nil
}

func readLinkTarget(zf *zip.File) (string, error) {
	if zf.UncompressedSize64 > maxLinkTarget {
		return "", unsafeEntry(zf.Name, "symbolic link target is longer than %d bytes", maxLinkTarget)
	}
	c, err := openContent(zf)
	if err != nil {
		return "", err
	}
	// The content is not bounded by the declared size checked above.
	b, err := io.ReadAll(io.LimitReader(c, maxLinkTarget+1))
	if err != nil {
		return "", contentError(zf.Name, err)
	}
	if len(b) > maxLinkTarget {
		return "", unsafeEntry(zf.Name, "symbolic link target is longer than %d bytes", maxLinkTarget)
	}
	return string(b), nil
}

// checkLinkTarget allows a link only if its target is relative and stays
// inside the archive root. ".." is allowed only at the start of the target:
// the kernel resolves "x/.." physically, so if x were itself a link (say to
// the root), "x/.." would leave the root even though it looks harmless
// lexically. Leading ".." components are safe because the link's own parent
// directories are real directories (no entry may live beneath a link).
func checkLinkTarget(raw, name, target string) error {
	switch {
	case target == "":
		return unsafeEntry(raw, "symbolic link has an empty target")
	case strings.ContainsRune(target, 0):
		return unsafeEntry(raw, "symbolic link target contains a NUL byte")
	case isAbs(target):
		return unsafeEntry(raw, "symbolic link points outside the archive (%q is an absolute path)", target)
	case strings.Contains(target, `\`):
		return unsafeEntry(raw, `symbolic link target %q contains a backslash; use "/" as the separator`, target)
	}
	depth := strings.Count(name, "/") // directories between the root and the link
	ups, descended := 0, false
	for c := range strings.SplitSeq(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if descended {
				return unsafeEntry(raw, `symbolic link target %q has ".." after another component; only leading ".." are allowed`, target)
			}
			ups++
			if ups > depth {
				return unsafeEntry(raw, "symbolic link points outside the archive (%q)", target)
			}
		default:
			descended = true
		}
	}
	return nil
}

// contentError classifies an error from reading an entry's decompressed
// content: content's own *Error, or a read error of the archive, which
// archiveReader.failed tells apart later.
func contentError(entry string, err error) error {
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	return corruptEntry(entry, err)
}

func extractedLimit(entry string, limit int64) *Error {
	return &Error{Kind: ErrLimit, Entry: entry, Limit: "MaxExtractedBytes",
		Reason: fmt.Sprintf("archive expands to more than %s, the limit for extracted files", formatSize(limit))}
}

// formatSize renders a byte count for people: exact when it is a whole number
// of MiB or KiB (as limits usually are), otherwise to one decimal.
func formatSize(n int64) string {
	const kib, mib = 1 << 10, 1 << 20
	switch {
	case n >= mib && n%mib == 0:
		return fmt.Sprintf("%d MiB", n/mib)
	case n >= mib:
		return fmt.Sprintf("%.1f MiB", float64(n)/mib)
	case n >= kib && n%kib == 0:
		return fmt.Sprintf("%d KiB", n/kib)
	case n >= kib:
		return fmt.Sprintf("%.1f KiB", float64(n)/kib)
	case n == 1:
		return "1 byte"
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}
