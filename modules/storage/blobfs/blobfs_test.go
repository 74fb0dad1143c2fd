package blobfs_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/storage/blobfs"
	"sless.kube5s.ru/sless/modules/storage/blobtest"
	"sless.kube5s.ru/sless/modules/storage/internal/cas"
)

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) storage.Blobs {
		return newStore(t, t.TempDir())
	})
}

func newStore(t *testing.T, dir string) *blobfs.Store {
	t.Helper()
	s, err := blobfs.New(dir)
	if err != nil {
		t.Fatalf("New(%s): %v", dir, err)
	}
	return s
}

func TestLayout(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir)
	b, err := s.Put(t.Context(), strings.NewReader("hello"))
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	path := filepath.Join(dir, "sha256", b.SHA256[:2], b.SHA256)
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "hello" {
		t.Errorf("ReadFile(%s) = %q, %v; want %q", path, got, err, "hello")
	}
	assertNoTemps(t, dir)
	// Uploaded code is readable by the server's user only.
	for p, want := range map[string]os.FileMode{path: 0o400, filepath.Dir(path): 0o700, filepath.Join(dir, "sha256"): 0o700, filepath.Join(dir, "tmp"): 0o700} {
		if st, err := os.Stat(p); err != nil {
			t.Error(err)
		} else if st.Mode().Perm() != want {
			t.Errorf("%s: mode %v; want %v", p, st.Mode().Perm(), want)
		}
	}
}

// failAfter returns n bytes, then an error.
type failAfter struct{ n int }

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("connection reset")
	}
	n := min(len(p), f.n)
	f.n -= n
	return n, nil
}

func TestFailedPutLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir)
	if _, err := s.Put(t.Context(), &failAfter{n: 1 << 20}); err == nil {
		t.Fatal("Put with a failing reader succeeded")
	}
	assertNoTemps(t, dir)
	blobs, err := filepath.Glob(filepath.Join(dir, "sha256", "*", "*"))
	if err != nil || len(blobs) != 0 {
		t.Errorf("blobs after a failed Put: %v, %v", blobs, err)
	}
}

func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "tmp"))
	if err != nil {
		t.Fatalf("read tmp: %v", err)
	}
	for _, e := range entries {
		t.Errorf("temporary file left behind: %s", e.Name())
	}
}

// TestKeysCannotEscape plants files where unchecked keys would lead and makes
// sure no operation reaches them.
func TestKeysCannotEscape(t *testing.T) {
	outer := t.TempDir()
	dir := filepath.Join(outer, "store")
	s := newStore(t, dir)
	victim := filepath.Join(outer, "victim")
	if err := os.WriteFile(victim, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{
		"../../victim",
		"../../../victim",
		strings.Repeat("../", 10) + filepath.Base(outer) + "/victim",
		victim,
	} {
		if rc, err := s.Open(t.Context(), key); !errors.Is(err, cas.ErrInvalidKey) {
			if rc != nil {
				rc.Close()
			}
			t.Errorf("Open(%q) error = %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.Stat(t.Context(), key); !errors.Is(err, cas.ErrInvalidKey) {
			t.Errorf("Stat(%q) error = %v, want ErrInvalidKey", key, err)
		}
		if err := s.Delete(t.Context(), key); !errors.Is(err, cas.ErrInvalidKey) {
			t.Errorf("Delete(%q) error = %v, want ErrInvalidKey", key, err)
		}
	}
	if got, err := os.ReadFile(victim); err != nil || string(got) != "keep me" {
		t.Errorf("victim file = %q, %v; want it untouched", got, err)
	}
}

func TestNewRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	newStore(t, dir)
	stale := filepath.Join(dir, "tmp", "put-stale")
	fresh := filepath.Join(dir, "tmp", "put-fresh")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	newStore(t, dir)
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temp file: Stat error = %v, want it removed", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh temp file (an upload in progress elsewhere) removed: %v", err)
	}
}

// TestOpenWhileReplaced checks that a reader keeps its content when the same
// blob is put again concurrently (the rename replaces the directory entry,
// not the open file).
func TestOpenWhileReplaced(t *testing.T) {
	s := newStore(t, t.TempDir())
	data := bytes.Repeat([]byte("x"), 1<<16)
	b, err := s.Put(t.Context(), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := s.Open(t.Context(), b.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := s.Put(t.Context(), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("read = %d bytes, %v; want %d bytes", len(got), err, len(data))
	}
}
