package durable_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"sless.kube5s.ru/sless/internal/durable"
	"sless.kube5s.ru/sless/internal/testenv/powercut"
)

func TestSurvivesPowerCut(t *testing.T) {
	disk := powercut.Mount(t)
	dir := disk.Dir
	if err := durable.WriteFile(filepath.Join(dir, "token"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := durable.WriteFile(filepath.Join(dir, "token"), []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := durable.MkdirAll(filepath.Join(dir, "a", "b", "c"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A tree built in a temporary directory and renamed into place, as the
	// local builder publishes an artifact.
	tmp := filepath.Join(dir, "a", ".tmp")
	if err := os.MkdirAll(filepath.Join(tmp, "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"handler.py": "code", "pkg/mod.py": "dep"} {
		if err := os.WriteFile(filepath.Join(tmp, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := durable.SyncTree(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "a", "artifact")); err != nil {
		t.Fatal(err)
	}
	if err := durable.NewDirSyncer(filepath.Join(dir, "a")).Sync(); err != nil {
		t.Fatal(err)
	}
	disk.Cut()

	for name, want := range map[string]string{"token": "new", "a/artifact/handler.py": "code", "a/artifact/pkg/mod.py": "dep"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Errorf("%s after a power cut: %q, %v; want %q", name, got, err, want)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "token")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("token after a power cut: %v, %v; want mode 0600", st, err)
	}
	if st, err := os.Stat(filepath.Join(dir, "a", "b", "c")); err != nil || !st.IsDir() {
		t.Errorf("a/b/c after a power cut: %v, %v; want a directory", st, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("the disk holds %d entries after a power cut, want 2 (token and a): %v", len(entries), entries)
	}
}

// TestWithoutSyncIsLost shows that the test above can fail: the same
// writes without the helpers do not survive.
func TestWithoutSyncIsLost(t *testing.T) {
	disk := powercut.Mount(t)
	if err := os.WriteFile(filepath.Join(disk.Dir, "token"), []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(disk.Dir, "a", "b"), 0o700); err != nil {
		t.Fatal(err)
	}
	disk.Cut()
	if entries, _ := os.ReadDir(disk.Dir); len(entries) != 0 {
		t.Errorf("the disk holds %v after a power cut; want nothing", entries)
	}
}

func TestMkdirAllOverAFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := durable.MkdirAll(filepath.Join(dir, "f"), 0o700); err == nil {
		t.Error("MkdirAll over a file succeeded")
	}
}

// TestWriteFileRemovesStaleTemporaries: the temporary file of a WriteFile
// that a crash interrupted goes at the next WriteFile of the same path; the
// files of other paths stay.
func TestWriteFileRemovesStaleTemporaries(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, ".token.tmp-123")
	other := filepath.Join(dir, ".other.tmp-456")
	for _, f := range []string{stale, other} {
		if err := os.WriteFile(f, []byte("secret"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := durable.WriteFile(filepath.Join(dir, "token"), []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{".other.tmp-456", "token"}; !slices.Equal(names, want) {
		t.Errorf("the directory holds %v, want %v", names, want)
	}
}
