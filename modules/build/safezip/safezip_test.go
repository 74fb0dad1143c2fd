package safezip

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// entry describes one zip entry for buildZip. A zero mode means a regular
// 0644 file; fs.ModeSymlink makes body the link target.
type entry struct {
	name  string
	body  string
	mode  fs.FileMode
	flags uint16
}

func file(name, body string) entry { return entry{name: name, body: body} }
func directory(name string) entry  { return entry{name: name, mode: fs.ModeDir | 0o755} }
func link(name, target string) entry {
	return entry{name: name, body: target, mode: fs.ModeSymlink | 0o777}
}

func buildZip(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for _, e := range entries {
		fh := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Flags: e.flags}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		fh.SetMode(mode)
		fw, err := w.CreateHeader(fh)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(fw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// bombZip returns an archive with a small honest file followed by name (of the
// given mode), whose header declares declared bytes while its deflate stream
// holds actual zero bytes.
func bombZip(t testing.TB, name string, mode fs.FileMode, declared, actual int) []byte {
	t.Helper()
	var compressed bytes.Buffer
	fw, err := flate.NewWriter(&compressed, flate.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	content := make([]byte, actual)
	if _, err := fw.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	ok, err := w.Create("ok.txt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(ok, "written before the bomb"); err != nil {
		t.Fatal(err)
	}
	fh := &zip.FileHeader{
		Name:               name,
		Method:             zip.Deflate,
		CRC32:              crc32.ChecksumIEEE(content),
		CompressedSize64:   uint64(compressed.Len()),
		UncompressedSize64: uint64(declared),
	}
	fh.SetMode(mode)
	raw, err := w.CreateRaw(fh)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Write(compressed.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rawZip returns an archive with one stored entry whose header is fh.
func rawZip(t testing.TB, fh *zip.FileHeader, body string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	fh.CompressedSize64 = uint64(len(body))
	fh.UncompressedSize64 = uint64(len(body))
	fh.CRC32 = crc32.ChecksumIEEE([]byte(body))
	fw, err := w.CreateRaw(fh)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(fw, body); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// badChecksumZip returns an archive whose one stored entry does not match
// the CRC-32 of its header.
func badChecksumZip(t testing.TB) []byte {
	t.Helper()
	data := rawZip(t, &zip.FileHeader{Name: "a.py", Method: zip.Store}, "print(1)\n")
	// The stored data follows the 30-byte local header and the name.
	data[30+len("a.py")] ^= 0xff
	return data
}

// manyEntries returns an archive of n empty stored files; past 65535 entries
// archive/zip writes zip64 records.
func manyEntries(t testing.TB, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for i := range n {
		if _, err := w.CreateHeader(&zip.FileHeader{Name: fmt.Sprintf("f%05d", i), Method: zip.Store}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type badCase struct {
	name string
	zip  []byte
	lim  Limits
	kind error
	// text must appear in the error message: the entry or the limit.
	text string
}

func badCases(t testing.TB) []badCase {
	good := buildZip(t, file("a.py", "print(1)\n"))
	return []badCase{
		{name: "zip slip", zip: buildZip(t, file("../evil.py", "x")),
			kind: ErrUnsafeEntry, text: `zip entry "../evil.py": path escapes the archive root`},
		{name: "zip slip nested", zip: buildZip(t, file("ok.py", "x"), file("a/../../evil.py", "x")),
			kind: ErrUnsafeEntry, text: `zip entry "a/../../evil.py": path escapes the archive root`},
		{name: "dot dot inside", zip: buildZip(t, file("a/../b.py", "x")),
			kind: ErrUnsafeEntry, text: `zip entry "a/../b.py": path contains ".."`},
		{name: "absolute", zip: buildZip(t, file("/etc/passwd", "x")),
			kind: ErrUnsafeEntry, text: `zip entry "/etc/passwd": absolute path`},
		{name: "drive letter", zip: buildZip(t, file(`C:\x`, "x")),
			kind: ErrUnsafeEntry, text: `"C:\\x": absolute path`},
		{name: "drive relative", zip: buildZip(t, file(`c:x`, "x")),
			kind: ErrUnsafeEntry, text: `"c:x": absolute path`},
		{name: "unc", zip: buildZip(t, file(`\\host\share\x`, "x")),
			kind: ErrUnsafeEntry, text: `absolute path`},
		{name: "backslash", zip: buildZip(t, file(`a\..\..\evil.py`, "x")),
			kind: ErrUnsafeEntry, text: `"a\\..\\..\\evil.py": name contains a backslash`},
		{name: "nul", zip: buildZip(t, file("a\x00.py", "x")),
			kind: ErrUnsafeEntry, text: "NUL"},
		{name: "empty name", zip: buildZip(t, file("", "x")),
			kind: ErrUnsafeEntry, text: "an entry has an empty name"},
		{name: "root", zip: buildZip(t, directory("./")),
			kind: ErrUnsafeEntry, text: `"./": name refers to the archive root`},
		{name: "long component", zip: buildZip(t, file(strings.Repeat("x", 256), "x")),
			kind: ErrUnsafeEntry, text: "longer than 255 bytes"},
		{name: "duplicate", zip: buildZip(t, file("a.py", "1"), file("a.py", "2")),
			kind: ErrUnsafeEntry, text: `zip entry "a.py": duplicate entry`},
		{name: "duplicate after cleaning", zip: buildZip(t, file("a/b.py", "1"), file("a//b.py", "2")),
			kind: ErrUnsafeEntry, text: `zip entry "a//b.py": duplicate entry (same path as "a/b.py")`},
		{name: "duplicate dir", zip: buildZip(t, directory("a/"), directory("a/")),
			kind: ErrUnsafeEntry, text: `zip entry "a/": duplicate entry`},
		{name: "under a file", zip: buildZip(t, file("a", "1"), file("a/b.py", "2")),
			kind: ErrUnsafeEntry, text: `zip entry "a/b.py": parent "a" is a file`},
		{name: "file over a directory", zip: buildZip(t, file("a/b.py", "1"), file("a", "2")),
			kind: ErrUnsafeEntry, text: `zip entry "a": file conflicts with directory "a"`},
		{name: "symlink escapes", zip: buildZip(t, link("lib/link", "../../etc")),
			kind: ErrUnsafeEntry, text: `zip entry "lib/link": symbolic link points outside the archive ("../../etc")`},
		{name: "symlink absolute", zip: buildZip(t, link("link", "/etc/passwd")),
			kind: ErrUnsafeEntry, text: `zip entry "link": symbolic link points outside the archive ("/etc/passwd" is an absolute path)`},
		{name: "symlink dot dot through link", zip: buildZip(t, link("d/root", ".."), link("up", "d/root/..")),
			kind: ErrUnsafeEntry, text: `zip entry "up": symbolic link target "d/root/.." has ".." after another component`},
		{name: "symlink empty", zip: buildZip(t, link("link", "")),
			kind: ErrUnsafeEntry, text: `zip entry "link": symbolic link has an empty target`},
		{name: "symlink backslash", zip: buildZip(t, link("link", `..\..\etc`)),
			kind: ErrUnsafeEntry, text: `zip entry "link": symbolic link target`},
		{name: "symlink then write through", zip: buildZip(t, directory("sub/"), link("link", "sub"), file("link/x.py", "x")),
			kind: ErrUnsafeEntry, text: `zip entry "link/x.py": parent "link" is a symbolic link`},
		{name: "escaping symlink then write through", zip: buildZip(t, link("link", "/tmp"), file("link/x.py", "x")),
			kind: ErrUnsafeEntry, text: `zip entry "link"`},
		{name: "write then symlink over parent", zip: buildZip(t, file("link/x.py", "x"), link("link", "sub")),
			kind: ErrUnsafeEntry, text: `zip entry "link": symbolic link conflicts with directory "link"`},
		{name: "fifo", zip: buildZip(t, entry{name: "pipe", mode: fs.ModeNamedPipe | 0o644}),
			kind: ErrUnsafeEntry, text: `zip entry "pipe": unsupported file type (named pipe)`},
		{name: "device", zip: buildZip(t, entry{name: "sda", mode: fs.ModeDevice | 0o644}),
			kind: ErrUnsafeEntry, text: `zip entry "sda": unsupported file type (block device)`},
		{name: "not a zip", zip: []byte("print('this is not a zip')\n"),
			kind: ErrNotZip, text: "upload is not a valid zip archive"},
		{name: "empty input", zip: nil,
			kind: ErrNotZip, text: "upload is not a valid zip archive"},
		{name: "truncated", zip: good[:len(good)/2],
			kind: ErrNotZip, text: "upload is not a valid zip archive"},
		{name: "encrypted", zip: buildZip(t, entry{name: "secret.py", body: "x", flags: 0x1}),
			kind: ErrNotZip, text: `zip entry "secret.py": encrypted entries are not supported`},
		{name: "unknown method", zip: rawZip(t, &zip.FileHeader{Name: "a.py", Method: 99}, "x"),
			kind: ErrNotZip, text: `zip entry "a.py": unsupported compression method 99`},
		{name: "corrupt content", zip: rawZip(t, &zip.FileHeader{Name: "a.py", Method: zip.Deflate}, "\xff\xff\xff"),
			kind: ErrNotZip, text: `zip entry "a.py": content is corrupt`},
		{name: "too many entries", zip: manyEntries(t, 11), lim: Limits{MaxEntries: 10},
			kind: ErrLimit, text: "archive has 11 entries; the limit is 10"},
		{name: "too many implied directories", zip: buildZip(t, file("a/b/c/d.py", "x"), file("e/f/g/h.py", "x")), lim: Limits{MaxEntries: 7},
			kind: ErrLimit, text: "archive creates more than 7 files, directories and links (counting directories implied by paths); the limit is 7"},
		{name: "too deep", zip: buildZip(t, file(strings.Repeat("d/", 128)+"x.py", "x")),
			kind: ErrUnsafeEntry, text: "path is nested more than 128 levels deep"},
		{name: "archive too large", zip: good, lim: Limits{MaxCompressedBytes: 100},
			kind: ErrLimit, text: "the limit is 100 bytes"},
		{name: "declared too large", zip: bombZip(t, "big.bin", 0o644, 1<<20, 1<<20), lim: Limits{MaxExtractedBytes: 64 << 10},
			kind: ErrLimit, text: "archive expands to more than 64 KiB, the limit for extracted files"},
		{name: "declared total too large",
			zip:  buildZip(t, file("a", strings.Repeat("a", 600)), file("b", strings.Repeat("b", 600))),
			lim:  Limits{MaxExtractedBytes: 1000},
			kind: ErrLimit, text: "more than 1000 bytes"},
		{name: "bomb with falsified size", zip: bombZip(t, "bomb.txt", 0o644, 100, 1<<20), lim: Limits{MaxExtractedBytes: 64 << 10},
			kind: ErrLimit, text: `zip entry "bomb.txt": archive expands to more than 64 KiB, the limit for extracted files`},
		{name: "falsified size within the limit", zip: bombZip(t, "bomb.txt", 0o644, 100, 1000),
			kind: ErrUnsafeEntry, text: `zip entry "bomb.txt": content is larger than the 100 bytes its header declares`},
		{name: "less data than declared", zip: bombZip(t, "short.txt", 0o644, 1000, 10),
			kind: ErrNotZip, text: `zip entry "short.txt": content is corrupt: 10 bytes of data where the header declares 1000 bytes`},
		{name: "checksum", zip: badChecksumZip(t),
			kind: ErrNotZip, text: `zip entry "a.py": content is corrupt: zip: checksum error`},
		{name: "symlink with falsified size", zip: bombZip(t, "link", fs.ModeSymlink|0o777, 1, 100),
			kind: ErrUnsafeEntry, text: `zip entry "link": content is larger than the 1 byte its header declares`},
	}
}

func TestExtractRejects(t *testing.T) {
	for _, tc := range badCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			err := Extract(bytes.NewReader(tc.zip), int64(len(tc.zip)), dir, tc.lim)
			assertError(t, err, tc.kind, tc.text)
			assertEmpty(t, dir)

			// Check refuses what Extract would, without writing.
			err = Check(bytes.NewReader(tc.zip), int64(len(tc.zip)), tc.lim)
			assertError(t, err, tc.kind, tc.text)
		})
	}
}

func assertError(t *testing.T, err, kind error, text string) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("error = %v, want kind %v", err, kind)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not a *Error", err)
	}
	if !strings.Contains(err.Error(), text) {
		t.Errorf("error = %q, want it to contain %q", err, text)
	}
	if (kind == ErrLimit) != (e.Limit != "") {
		t.Errorf("Limit = %q for kind %v", e.Limit, kind)
	}
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) > 0 {
		t.Errorf("%s not empty after failed extraction: %v", dir, entries)
	}
}

func TestExtractGood(t *testing.T) {
	data := buildZip(t,
		directory("app/"),
		file("app/main.py", "print('hi')\n"),
		entry{name: "app/run.sh", body: "#!/bin/sh\n", mode: fs.ModeSetuid | 0o4755},
		file("app/lib/util.py", "X = 1\n"),
		directory("empty/"),
		file("./top.txt", "top"),
		link("data/current", "v1"),
		file("data/v1/a.txt", "a"),
		link("bin/run", "../app/run.sh"),
		link("data/v1/root", "../.."),
		directory("data/"), // explicit entry after its children: fine
	)
	want := map[string]string{
		"app":             "dir 0755",
		"app/main.py":     "file 0644 print('hi')\n",
		"app/run.sh":      "file 0755 #!/bin/sh\n",
		"app/lib":         "dir 0755",
		"app/lib/util.py": "file 0644 X = 1\n",
		"empty":           "dir 0755",
		"top.txt":         "file 0644 top",
		"data":            "dir 0755",
		"data/current":    "link v1",
		"data/v1":         "dir 0755",
		"data/v1/a.txt":   "file 0644 a",
		"data/v1/root":    "link ../..",
		"bin":             "dir 0755",
		"bin/run":         "link ../app/run.sh",
	}
	if err := Check(bytes.NewReader(data), int64(len(data)), Limits{}); err != nil {
		t.Fatalf("Check: %v", err)
	}
	dir := t.TempDir()
	if err := Extract(bytes.NewReader(data), int64(len(data)), dir, Limits{}); err != nil {
		t.Fatalf("Extract: %v", err)
	}
	if diff := cmp.Diff(want, describeTree(t, dir)); diff != "" {
		t.Errorf("extracted tree (-want +got):\n%s", diff)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "bin", "run")); err != nil || string(got) != "#!/bin/sh\n" {
		t.Errorf("reading through bin/run = %q, %v", got, err)
	}
}

// describeTree maps each path under dir to its type, permissions and content.
func describeTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			got[filepath.ToSlash(rel)] = fmt.Sprintf("dir %04o", info.Mode().Perm())
		case d.Type() == fs.ModeSymlink:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			got[filepath.ToSlash(rel)] = "link " + target
		default:
			body, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			got[filepath.ToSlash(rel)] = fmt.Sprintf("file %04o %s", info.Mode(), body)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestExtractDeepTree extracts files at the deepest nesting allowed.
func TestExtractDeepTree(t *testing.T) {
	deep := strings.Repeat("d/", maxDepth-1)
	var entries []entry
	for i := range 100 {
		entries = append(entries, file(fmt.Sprintf("%s%d.py", deep, i), "x"))
	}
	data := buildZip(t, entries...)
	dir := t.TempDir()
	if err := Extract(bytes.NewReader(data), int64(len(data)), dir, Limits{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, deep+"99.py")); err != nil {
		t.Error(err)
	}
}

func TestExtractNeedsEmptyDir(t *testing.T) {
	data := buildZip(t, file("a.py", "x"))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := Extract(bytes.NewReader(data), int64(len(data)), dir, Limits{})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Extract into non-empty dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "keep")); err != nil {
		t.Errorf("existing file was touched: %v", err)
	}
}

// TestCopyCountsActualBytes exercises the decompressed-byte budget and the
// classification of failures directly (badCases reach the budget through
// archives whose headers lie).
func TestCopyCountsActualBytes(t *testing.T) {
	zf := &zip.File{FileHeader: zip.FileHeader{Name: "big.bin", UncompressedSize64: 10}}
	tests := []struct {
		name    string
		src     io.Reader
		dst     io.Writer
		left    int64
		wantN   int64
		wantErr string
		kind    error
	}{
		{name: "within budget", src: strings.NewReader("12345"), dst: io.Discard, left: 5, wantN: 5},
		{name: "over budget", src: strings.NewReader("123456"), dst: io.Discard, left: 5, wantN: 6,
			kind: ErrLimit, wantErr: `zip entry "big.bin": archive expands to more than 100 bytes`},
		{name: "corrupt", src: errReader{zip.ErrChecksum}, dst: io.Discard, left: 50,
			kind: ErrNotZip, wantErr: `zip entry "big.bin": content is corrupt: zip: checksum error`},
		{name: "disk full", src: strings.NewReader("12"), dst: errWriter{errors.New("no space left")}, left: 50,
			wantErr: `safezip: writing "big.bin": no space left`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := copyContent(tc.dst, tc.src, zf, tc.left, 100)
			if n != tc.wantN {
				t.Errorf("n = %d, want %d", n, tc.wantN)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("copy: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("copy error = %v, want %q", err, tc.wantErr)
			}
			if tc.kind != nil && !errors.Is(err, tc.kind) {
				t.Errorf("error %v is not %v", err, tc.kind)
			}
			var e *Error
			if tc.kind == nil && errors.As(err, &e) {
				t.Errorf("write failure %v reported as a problem with the archive", err)
			}
		})
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }

// TestCountEntries checks the pre-count against what archive/zip loads,
// including archives with a prefix (self-extracting style) and zip64 ones.
func TestCountEntries(t *testing.T) {
	small := buildZip(t, directory("a/"), file("a/b", "x"), link("c", "a"))
	prefixed := append([]byte(strings.Repeat("#!/bin/sh\nexit 0\n", 10)), small...)
	tests := []struct {
		name string
		zip  []byte
	}{
		{"small", small},
		{"prefixed", prefixed},
		{"empty archive", buildZip(t)},
		{"zip64", manyEntries(t, 70_000)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			zr, err := zip.NewReader(bytes.NewReader(tc.zip), int64(len(tc.zip)))
			if err != nil {
				t.Fatal(err)
			}
			n, err := countEntries(bytes.NewReader(tc.zip), int64(len(tc.zip)))
			if err != nil {
				t.Fatal(err)
			}
			if n != len(zr.File) {
				t.Errorf("countEntries = %d, archive/zip loads %d", n, len(zr.File))
			}
		})
	}
}

// TestManyEntriesRejectedBeforeLoading checks that an archive with too many
// entries is refused without archive/zip allocating for each of them.
func TestManyEntriesRejectedBeforeLoading(t *testing.T) {
	data := manyEntries(t, 70_000)
	var err error
	allocs := testing.AllocsPerRun(1, func() {
		err = Check(bytes.NewReader(data), int64(len(data)), Limits{})
	})
	assertError(t, err, ErrLimit, "archive has 70000 entries; the limit is 10000")
	if allocs > 100 {
		t.Errorf("Check made %v allocations; the entries were loaded", allocs)
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{
		0:         "0 bytes",
		1:         "1 byte",
		1000:      "1000 bytes",
		1024:      "1 KiB",
		1536:      "1.5 KiB",
		50 << 20:  "50 MiB",
		3<<20 + 1: "3.0 MiB",
	} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// FuzzExtract checks that no input makes Extract panic, write outside its
// directory, create a link that resolves outside it, or leave anything behind
// on failure; and that Check agrees with Extract.
func FuzzExtract(f *testing.F) {
	for _, tc := range badCases(f) {
		f.Add(tc.zip)
	}
	f.Add(buildZip(f, directory("a/"), file("a/b.py", "x"), link("a/c", "b.py"), link("d", "a/c"), link("e", "a/../a")))
	lim := Limits{MaxCompressedBytes: 1 << 20, MaxExtractedBytes: 64 << 10, MaxEntries: 100}
	// Extraction happens a few levels down so that escapes land where they
	// can be seen. Archives that Check refuses are extracted into one shared
	// directory, which must stay empty: creating a directory per input would
	// make the fuzzer I/O-bound.
	base := f.TempDir()
	parent := filepath.Join(base, "a", "b")
	empty := filepath.Join(parent, "empty")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		assertCountIsUpperBound(t, data)
		checkErr := Check(bytes.NewReader(data), int64(len(data)), lim)
		dir := empty
		if checkErr == nil {
			var err error
			if dir, err = os.MkdirTemp(parent, "out"); err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
		}
		err := Extract(bytes.NewReader(data), int64(len(data)), dir, lim)
		assertOnlyInside(t, base, empty, dir)
		if err == nil {
			if checkErr != nil {
				t.Fatalf("Check failed (%v) but Extract succeeded", checkErr)
			}
			return
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("Extract error %v is not a *Error", err)
		}
		assertEmpty(t, dir)
	})
}

// assertOnlyInside fails if anything under base lies outside the directories
// dirs (other than their parents), or if a link inside them resolves outside
// the directory it is in.
func assertOnlyInside(t *testing.T, base string, dirs ...string) {
	t.Helper()
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		for _, dir := range dirs {
			if p == dir || strings.HasPrefix(dir, p+string(filepath.Separator)) || p == base {
				return nil // dir itself or one of its parents
			}
			if strings.HasPrefix(p, dir+string(filepath.Separator)) {
				if d.Type() == fs.ModeSymlink {
					assertLinkInside(t, p, dir)
				}
				return nil
			}
		}
		t.Errorf("extraction created %s outside %v", p, dirs)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func assertLinkInside(t *testing.T, link, dir string) {
	t.Helper()
	target, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.IsAbs(target) {
		t.Errorf("link %s has absolute target %q", link, target)
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	resolved, err := filepath.EvalSymlinks(link)
	if err != nil {
		return // dangling or a loop: points nowhere, so nowhere outside
	}
	if resolved != realDir && !strings.HasPrefix(resolved, realDir+string(filepath.Separator)) {
		t.Errorf("link %s -> %q resolves outside %s, to %s", link, target, dir, resolved)
	}
}

// assertCountIsUpperBound checks that the pre-count never lets archive/zip
// load more entries than it counted, and never refuses what archive/zip reads.
func assertCountIsUpperBound(t *testing.T, data []byte) {
	t.Helper()
	zr, zerr := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if zerr != nil && !errors.Is(zerr, zip.ErrInsecurePath) {
		return
	}
	n, err := countEntries(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("countEntries: %v, but archive/zip reads the archive", err)
	}
	if n < len(zr.File) {
		t.Fatalf("countEntries = %d, archive/zip loads %d", n, len(zr.File))
	}
}

func TestArchiveIsFile(t *testing.T) {
	data := buildZip(t,
		file("handler.py", "x"),
		directory("handler.js/"),
		file("src/app.py", "x"),
		link("lib", "src"),
		link("main.py", "src/app.py"),
		link("chain.py", "main.py"),
		link("dir.py", "src"),
		link("src/up", ".."),
		link("loop1", "loop2"),
		link("loop2", "loop1"),
		link("dangling.py", "missing.py"),
	)
	a, err := Inspect(bytes.NewReader(data), int64(len(data)), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"handler.py":        true,
		"handler.js":        false, // a directory
		"src/app.py":        true,
		"lib/app.py":        true, // through a link to a directory
		"main.py":           true,
		"chain.py":          true,
		"dir.py":            false,
		"src/up/handler.py": true,
		"loop1":             false,
		"dangling.py":       false,
		"missing.py":        false,
		"handler.py/x":      false,
		"src":               false,
	} {
		if got := a.IsFile(name); got != want {
			t.Errorf("IsFile(%q) = %v, want %v", name, got, want)
		}
	}
	wantTop := []string{"chain.py", "dangling.py", "dir.py", "handler.js/", "handler.py", "lib", "loop1", "loop2", "main.py", "src/"}
	if diff := cmp.Diff(wantTop, a.TopLevel()); diff != "" {
		t.Errorf("TopLevel (-want +got):\n%s", diff)
	}
}

// failingReaderAt fails every read from offset failAt on, as a failing disk
// would.
type failingReaderAt struct {
	r      io.ReaderAt
	failAt int64
}

func (f failingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.failAt {
		return 0, errors.New("read /tmp/upload-1.zip: input/output error")
	}
	return f.r.ReadAt(p, off)
}

// TestReadFailureIsNotTheArchives checks that an archive that cannot be read
// is reported as a failure to read it, not as a problem of the archive that
// an API would show to the uploader.
func TestReadFailureIsNotTheArchives(t *testing.T) {
	data := buildZip(t, file("a.py", strings.Repeat("print(1)\n", 1000)))
	for _, failAt := range []int64{0, 40, int64(len(data)) - 30} {
		r := failingReaderAt{bytes.NewReader(data), failAt}
		for name, err := range map[string]error{
			"Check":   Check(r, int64(len(data)), Limits{}),
			"Extract": Extract(r, int64(len(data)), t.TempDir(), Limits{}),
		} {
			if _, ok := errors.AsType[*Error](err); ok || err == nil || !strings.Contains(err.Error(), "safezip: reading the archive: ") {
				t.Errorf("%s with reads failing from offset %d: %v, want a read error that is not an *Error", name, failAt, err)
			}
		}
	}
}
