package client

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"sless.kube5s.ru/sless/modules/build/safezip"
)

func TestIgnoreRules(t *testing.T) {
	tests := []struct {
		rules string
		name  string
		isDir bool
		want  bool
	}{
		{"*.pyc", "a.pyc", false, true},
		{"*.pyc", "x/y/a.pyc", false, true},
		{"*.pyc", "a.py", false, false},
		{"*.pyc\r\n", "a.pyc", false, true},
		{"build/", "build", true, true},
		{"build/", "src/build", true, true},
		{"build/", "build", false, false},
		{"/build", "build", true, true},
		{"/build", "src/build", true, false},
		{"doc/frotz", "doc/frotz", false, true},
		{"doc/frotz", "a/doc/frotz", false, false},
		{"doc/frotz/", "doc/frotz", true, true},
		{"**/foo", "foo", false, true},
		{"**/foo", "a/b/foo", false, true},
		{"foo/**", "foo", true, false},
		{"foo/**", "foo/x", false, true},
		{"foo/**", "foo/x/y", false, true},
		{"a/**/b", "a/b", false, true},
		{"a/**/b", "a/x/b", false, true},
		{"a/**/b", "a/x/y/b", false, true},
		{"a/**/b", "a/x/c", false, false},
		{"a/**/b", "c/a/b", false, false},
		{"?.txt", "a.txt", false, true},
		{"?.txt", "ab.txt", false, false},
		{"[ab].txt", "b.txt", false, true},
		{"[ab].txt", "c.txt", false, false},
		{"a*", "x/abc", false, true},
		{"a*", "a/b", false, false}, // the walk never gets here: "a" itself is excluded
		{"*.log\n!keep.log", "x.log", false, true},
		{"*.log\n!keep.log", "keep.log", false, false},
		{"*.log\n!keep.log", "d/keep.log", false, false},
		{"!keep.log\n*.log", "keep.log", false, true},
		{"# comment\n\n   \n", "# comment", false, false},
		{`\#file`, "#file", false, true},
		{`\!important`, "!important", false, true},
		{"trailing   ", "trailing", false, true},
		{`space\ `, "space ", false, true},
		{"/", "anything", false, false},
		{"!", "anything", false, false},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q %s", tc.rules, tc.name), func(t *testing.T) {
			rules, err := parseIgnore(strings.NewReader(tc.rules))
			if err != nil {
				t.Fatal(err)
			}
			if got := rules.ignored(tc.name, tc.isDir); got != tc.want {
				t.Errorf("ignored(%q, dir=%v) = %v, want %v", tc.name, tc.isDir, got, tc.want)
			}
		})
	}
}

func TestParseIgnoreBadPattern(t *testing.T) {
	_, err := parseIgnore(strings.NewReader("*.pyc\n[abc\n"))
	if err == nil || !strings.Contains(err.Error(), ".slessignore line 2: bad pattern \"[abc\"") {
		t.Fatalf("parseIgnore error = %v", err)
	}
}

// treeNode describes a path to create in a test tree: a file (content, with
// mode perm, default 0644), a directory (dir) or a symbolic link (link).
type treeNode struct {
	path    string
	content string
	perm    fs.FileMode
	dir     bool
	link    string
}

func writeTree(t *testing.T, root string, nodes ...treeNode) {
	t.Helper()
	for _, n := range nodes {
		p := filepath.Join(root, filepath.FromSlash(n.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case n.dir:
			err = os.Mkdir(p, 0o755)
		case n.link != "":
			err = os.Symlink(n.link, p)
		default:
			perm := n.perm
			if perm == 0 {
				perm = 0o644
			}
			if err = os.WriteFile(p, []byte(n.content), perm); err == nil {
				err = os.Chmod(p, perm) // beat the umask
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// listZip describes each entry of an archive, in archive order.
func listZip(t *testing.T, data []byte) []string {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !f.Modified.Equal(zipEpoch) {
			t.Errorf("%s: modified %v, want %v", f.Name, f.Modified, zipEpoch)
		}
		got = append(got, fmt.Sprintf("%s %v %s", f.Name, f.Mode(), body))
	}
	return got
}

func TestZipDir(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root,
		treeNode{path: ".slessignore", content: "# build output\n*.pyc\n__pycache__/\n/secrets\n!keep.pyc\n"},
		treeNode{path: "main.py", content: "print('hi')"},
		treeNode{path: "run.sh", content: "#!/bin/sh", perm: 0o700},
		treeNode{path: "private.txt", content: "p", perm: 0o600},
		treeNode{path: "lib/util.py", content: "X = 1"},
		treeNode{path: "lib/util.pyc", content: "junk"},
		treeNode{path: "lib/keep.pyc", content: "kept"},
		treeNode{path: "lib/__pycache__/util.cpython-312.pyc", content: "junk"},
		treeNode{path: "secrets/key", content: "junk"},
		treeNode{path: "lib/secrets/key", content: "kept"},
		treeNode{path: ".git/config", content: "junk"},
		treeNode{path: "vendor/dep/.git", content: "gitdir: ../../.git/modules/dep"},
		treeNode{path: "vendor/dep/dep.py", content: "dep"},
		treeNode{path: "static", dir: true},
		treeNode{path: "util.py", link: "lib/util.py"},
		treeNode{path: "lib/self", link: ".."},
	)
	data, sum, err := ZipDir(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"lib/ drwxr-xr-x ",
		"lib/keep.pyc -rw-r--r-- kept",
		"lib/secrets/ drwxr-xr-x ",
		"lib/secrets/key -rw-r--r-- kept",
		"lib/self Lrwxrwxrwx ..",
		"lib/util.py -rw-r--r-- X = 1",
		"main.py -rw-r--r-- print('hi')",
		"private.txt -rw-r--r-- p",
		"run.sh -rwxr-xr-x #!/bin/sh",
		"static/ drwxr-xr-x ",
		"util.py Lrwxrwxrwx lib/util.py",
		"vendor/ drwxr-xr-x ",
		"vendor/dep/ drwxr-xr-x ",
		"vendor/dep/dep.py -rw-r--r-- dep",
	}
	if diff := cmp.Diff(want, listZip(t, data)); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	if len(sum) != 64 || strings.ToLower(sum) != sum {
		t.Errorf("sha256hex = %q, want 64 lower-case hex digits", sum)
	}
}

func TestZipDirDeterministic(t *testing.T) {
	files := []treeNode{
		{path: "b.py", content: "b"},
		{path: "a/z.py", content: "z"},
		{path: "a/y.sh", content: "y", perm: 0o755},
		{path: "c", link: "a/z.py"},
	}
	first := t.TempDir()
	writeTree(t, first, files...)
	_, sum1, err := ZipDir(first)
	if err != nil {
		t.Fatal(err)
	}
	_, again, err := ZipDir(first)
	if err != nil {
		t.Fatal(err)
	}
	if again != sum1 {
		t.Errorf("zipping twice: %s then %s", sum1, again)
	}
	touch(t, first, files, time.Now().Add(time.Hour))
	if _, touched, err := ZipDir(first); err != nil || touched != sum1 {
		t.Errorf("after touching the files: sha256 %s (was %s), err %v", touched, sum1, err)
	}
	// A symbolic link to the directory zips the same.
	via := filepath.Join(t.TempDir(), "via")
	if err := os.Symlink(first, via); err != nil {
		t.Fatal(err)
	}
	if _, linked, err := ZipDir(via); err != nil || linked != sum1 {
		t.Errorf("through a link to the directory: sha256 %s (was %s), err %v", linked, sum1, err)
	}

	// Same content created in another order, at other times, with other
	// non-execute permission bits.
	second := t.TempDir()
	for i := len(files) - 1; i >= 0; i-- {
		n := files[i]
		if n.perm == 0 {
			n.perm = 0o600
		} else {
			n.perm = 0o700
		}
		writeTree(t, second, n)
	}
	touch(t, second, files, time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC))
	_, sum2, err := ZipDir(second)
	if err != nil {
		t.Fatal(err)
	}
	if sum2 != sum1 {
		t.Errorf("same tree, different sha256: %s and %s", sum1, sum2)
	}

	if err := os.WriteFile(filepath.Join(second, "b.py"), []byte("B"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, sum3, err := ZipDir(second); err != nil || sum3 == sum2 {
		t.Errorf("after changing a file: sha256 %s (was %s), err %v", sum3, sum2, err)
	}
}

// touch sets the modification time of the files (not links) among nodes.
func touch(t *testing.T, root string, nodes []treeNode, when time.Time) {
	t.Helper()
	for _, n := range nodes {
		if n.link == "" {
			if err := os.Chtimes(filepath.Join(root, n.path), when, when); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestZipDirSymlinks(t *testing.T) {
	outside := t.TempDir()
	writeTree(t, outside, treeNode{path: "secret", content: "s"})
	tests := []struct {
		name    string
		nodes   []treeNode
		want    string // target stored for "link", if no error
		wantErr string // with "DIR" standing for the directory
	}{
		{name: "relative inside", nodes: []treeNode{{path: "a/f", content: "x"}, {path: "link", link: "a/f"}},
			want: "a/f"},
		{name: "to directory", nodes: []treeNode{{path: "a/f", content: "x"}, {path: "link", link: "./a"}},
			want: "a"},
		{name: "chain", nodes: []treeNode{{path: "a/f", content: "x"}, {path: "b", link: "a/f"}, {path: "link", link: "b"}},
			want: "a/f"},
		{name: "absolute inside", nodes: []treeNode{{path: "a/f", content: "x"}, {path: "link", link: "DIR/a/f"}},
			want: "a/f"},
		{name: "outside", nodes: []treeNode{{path: "f", content: "x"}, {path: "link", link: filepath.Join(outside, "secret")}},
			wantErr: "symbolic link DIR/link points outside DIR"},
		{name: "relative outside", nodes: []treeNode{{path: "f", content: "x"}, {path: "link", link: "../../../../../../../../etc/passwd"}},
			wantErr: "symbolic link DIR/link points outside DIR"},
		{name: "broken", nodes: []treeNode{{path: "f", content: "x"}, {path: "link", link: "missing"}},
			wantErr: "symbolic link DIR/link is broken"},
		{name: "to ignored", nodes: []treeNode{{path: ".slessignore", content: "*.bin\n"}, {path: "f.bin", content: "x"}, {path: "link", link: "f.bin"}},
			wantErr: "symbolic link DIR/link points to DIR/f.bin, which is not uploaded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for i, n := range tc.nodes {
				tc.nodes[i].link = strings.ReplaceAll(n.link, "DIR", root)
			}
			writeTree(t, root, tc.nodes...)
			data, _, err := ZipDir(root)
			if tc.wantErr != "" {
				want := strings.ReplaceAll(tc.wantErr, "DIR", root)
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("ZipDir error = %v, want it to contain %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range zr.File {
				if f.Name != "link" {
					continue
				}
				rc, err := f.Open()
				if err != nil {
					t.Fatal(err)
				}
				target, _ := io.ReadAll(rc)
				rc.Close()
				if f.Mode().Type() != fs.ModeSymlink || string(target) != tc.want {
					t.Errorf("link stored as %v -> %q, want symlink -> %q", f.Mode(), target, tc.want)
				}
			}
		})
	}
}

func TestZipDirErrors(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		root := t.TempDir()
		writeTree(t, root, treeNode{path: "sub", dir: true})
		assertZipError(t, root, "nothing to upload in "+root)
	})
	t.Run("everything ignored", func(t *testing.T) {
		root := t.TempDir()
		writeTree(t, root, treeNode{path: ".slessignore", content: "*\n"}, treeNode{path: "a.py", content: "x"})
		assertZipError(t, root, "nothing to upload in "+root)
	})
	t.Run("not a directory", func(t *testing.T) {
		root := t.TempDir()
		writeTree(t, root, treeNode{path: "f", content: "x"})
		assertZipError(t, filepath.Join(root, "f"), "is not a directory")
	})
	t.Run("missing", func(t *testing.T) {
		assertZipError(t, filepath.Join(t.TempDir(), "nope"), "no such file or directory")
	})
	t.Run("socket", func(t *testing.T) {
		root := t.TempDir()
		writeTree(t, root, treeNode{path: "a.py", content: "x"})
		l, err := net.Listen("unix", filepath.Join(root, "sock"))
		if err != nil {
			t.Skipf("cannot create a unix socket: %v", err)
		}
		defer l.Close()
		assertZipError(t, root, filepath.Join(root, "sock")+": cannot upload a socket")
	})
	t.Run("bad ignore file", func(t *testing.T) {
		root := t.TempDir()
		writeTree(t, root, treeNode{path: ".slessignore", content: "[\n"}, treeNode{path: "a.py", content: "x"})
		assertZipError(t, root, ".slessignore line 1: bad pattern")
	})
	t.Run("name the server refuses", func(t *testing.T) {
		root := t.TempDir()
		writeTree(t, root, treeNode{path: `a\b.py`, content: "x"})
		assertZipError(t, root, `cannot be uploaded: zip entry "a\\b.py": name contains a backslash`)
	})
	t.Run("too large", func(t *testing.T) {
		// A sparse file: the limit is enforced from its size, before reading.
		root := t.TempDir()
		writeTree(t, root, treeNode{path: "a.py", content: "x"})
		big, err := os.Create(filepath.Join(root, "big.bin"))
		if err != nil {
			t.Fatal(err)
		}
		if err := big.Truncate(250<<20 + 1); err != nil {
			t.Fatal(err)
		}
		big.Close()
		assertZipError(t, root, "files in "+root+" add up to more than 250 MiB, the limit for uploads")
	})
}

func assertZipError(t *testing.T, dir, want string) {
	t.Helper()
	_, _, err := ZipDir(dir)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("ZipDir error = %v, want it to contain %q", err, want)
	}
}

func TestZipDirLimits(t *testing.T) {
	// Incompressible content, so that the archive is as large as the files.
	noise := make([]byte, 1200)
	rand.NewChaCha8([32]byte{}).Read(noise)
	root := t.TempDir()
	writeTree(t, root,
		treeNode{path: "a", content: string(noise[:600])},
		treeNode{path: "b", content: string(noise[600:])},
		treeNode{path: "c", content: "c"},
	)
	tests := []struct {
		set  func(*safezip.Limits)
		want string
	}{
		{func(l *safezip.Limits) { l.MaxEntries = 2 }, "holds more than 2 files and directories to upload, the limit"},
		{func(l *safezip.Limits) { l.MaxExtractedBytes = 1000 }, "add up to more than 1000 bytes, the limit for uploads"},
		{func(l *safezip.Limits) { l.MaxCompressedBytes = 1000 }, "the archive is larger than 1000 bytes, the limit for uploads"},
	}
	for _, tc := range tests {
		lim := safezip.DefaultLimits()
		tc.set(&lim)
		_, _, err := zipDir(root, lim)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("zipDir with %+v: error = %v, want it to contain %q", lim, err, tc.want)
		}
	}
}

// TestZipDirRoundTrip extracts an uploaded archive the way the server does and
// compares the result with the source tree.
func TestZipDirRoundTrip(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src,
		treeNode{path: "handler.py", content: "def handler(event): return event"},
		treeNode{path: "bin/tool", content: "#!/bin/sh\necho hi", perm: 0o755},
		treeNode{path: "pkg/mod/__init__.py", content: ""},
		treeNode{path: "pkg/mod/data.json", content: "{}"},
		treeNode{path: "node_modules/.bin/tool", link: "../../bin/tool"},
		treeNode{path: "current", link: "pkg/mod"},
		treeNode{path: "empty", dir: true},
	)
	data, _, err := ZipDir(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := safezip.Extract(bytes.NewReader(data), int64(len(data)), dst, safezip.Limits{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(describeTree(t, src), describeTree(t, dst)); diff != "" {
		t.Errorf("extracted tree differs from source (-src +extracted):\n%s", diff)
	}
}

// describeTree maps each path under root to its type, execute bit and content
// or link target.
func describeTree(t *testing.T, root string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			got[name] = "dir"
		case d.Type() == fs.ModeSymlink:
			target, err := os.Readlink(p)
			got[name] = "link " + target
			return err
		default:
			info, err := d.Info()
			if err != nil {
				return err
			}
			body, err := os.ReadFile(p)
			got[name] = fmt.Sprintf("file exec=%v %s", info.Mode()&0o111 != 0, body)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}
