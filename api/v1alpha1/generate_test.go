package v1alpha1_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"sless.kube5s.ru/sless/internal/testenv"
)

// generated lists the files hack/generate.sh writes under root, relative
// to it.
func generated(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"api/*/zz_generated.*.go", "deploy/base/crds/*.yaml", "deploy/base/rbac/role.yaml"} {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range matches {
			rel, _ := filepath.Rel(root, m)
			files = append(files, rel)
		}
	}
	slices.Sort(files)
	return files
}

// copyTree copies the directory src/dir into dst/dir.
func copyTree(t *testing.T, src, dst, dir string) {
	t.Helper()
	err := filepath.WalkDir(filepath.Join(src, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, info.Mode().Perm())
	})
	if err != nil {
		t.Fatalf("copying %s: %v", dir, err)
	}
}

// TestGeneratedFilesAreCurrent runs hack/generate.sh on a copy of the API
// types and fails when the committed deepcopy code, CRDs or ClusterRole
// differ from what it generates.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs controller-gen: seconds, and a minute to build it the first time")
	}
	root := testenv.RepoRoot(t)
	tmp := t.TempDir()
	for _, f := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyTree(t, root, tmp, "hack")
	copyTree(t, root, tmp, "api")
	for _, dir := range []string{"deploy/base/crds", "deploy/base/rbac"} {
		if err := os.MkdirAll(filepath.Join(tmp, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Only what comes from api/: the copy has nothing else.
	cmd := exec.Command(filepath.Join(tmp, "hack", "generate.sh"), "api")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/generate.sh on a copy of the API types: %v\n%s", err, out)
	}

	committed, fresh := generated(t, root), generated(t, tmp)
	for _, f := range fresh {
		if !slices.Contains(committed, f) {
			t.Errorf("%s is missing: run hack/generate.sh and commit the result", f)
		}
	}
	for _, f := range committed {
		if !slices.Contains(fresh, f) {
			t.Errorf("%s is no longer generated: run hack/generate.sh and commit the result", f)
			continue
		}
		want, err := os.ReadFile(filepath.Join(tmp, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run hack/generate.sh and commit the result", f)
		}
	}
}
