// Package deploy holds the tests of the install manifests beside it: every
// overlay renders with kustomize's Go API (krusty, the library behind
// `kustomize build` and `kubectl apply -k`), keeps the invariants an
// operator relies on, and is accepted by a real API server.
package deploy

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"sless.kube5s.ru/sless/internal/testenv"
)

// variant is an install to render: an overlay of deploy/, or one written
// by the test.
type variant struct {
	name string
	// dir is the kustomization's directory, relative to deploy/.
	dir string
	// kustomization, when set, is written to dir first.
	kustomization string
}

// variants are the overlays, and production with every component, so that
// an optional component is rendered and validated too.
func variants(t *testing.T, deployDir string) []variant {
	t.Helper()
	v := []variant{{name: "production", dir: "production"}, {name: "quickstart", dir: "quickstart"}}
	comps, err := os.ReadDir(filepath.Join(deployDir, "components"))
	if err != nil {
		t.Fatal(err)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../production\ncomponents:\n"
	for _, c := range comps {
		if c.IsDir() {
			k += "  - ../components/" + c.Name() + "\n"
		}
	}
	return append(v, variant{name: "production with every component", dir: "test-every-component", kustomization: k})
}

// rendered is the output of one variant.
type rendered struct {
	name string
	objs []*unstructured.Unstructured
}

// find returns the object of kind, namespace and name, or nil.
func (r rendered) find(kind, namespace, name string) *unstructured.Unstructured {
	for _, o := range r.objs {
		if o.GetKind() == kind && o.GetNamespace() == namespace && o.GetName() == name {
			return o
		}
	}
	return nil
}

// ofKind returns the objects of kind.
func (r rendered) ofKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range r.objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// generated returns the object of kind in namespace that kustomize
// generated from name (name plus a hash suffix), or nil.
func (r rendered) generated(kind, namespace, name string) *unstructured.Unstructured {
	for _, o := range r.ofKind(kind) {
		if o.GetNamespace() == namespace && (o.GetName() == name || strings.HasPrefix(o.GetName(), name+"-")) {
			return o
		}
	}
	return nil
}

// renderAll copies deploy/ into a temporary directory, fills in the
// credentials an operator would (production's sless.env from its example,
// the quickstart's by its credentials.sh), and renders every variant there,
// so that no file of the checkout is written or read but the committed
// ones.
func renderAll(t *testing.T) []rendered {
	t.Helper()
	dir := copyDeploy(t)
	copyFile(t, filepath.Join(dir, "production", "sless.env.example"), filepath.Join(dir, "production", "sless.env"))
	runCredentials(t, dir)
	var out []rendered
	for _, v := range variants(t, dir) {
		out = append(out, rendered{name: v.name, objs: render(t, dir, v)})
	}
	return out
}

// render renders v in the copy of deploy/ at dir.
func render(t *testing.T, dir string, v variant) []*unstructured.Unstructured {
	t.Helper()
	path := filepath.Join(dir, v.dir)
	if v.kustomization != "" {
		if err := os.MkdirAll(path, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(path, "kustomization.yaml"), []byte(v.kustomization), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The options of `kubectl apply -k`: files of the kustomization's tree
	// only, no plugins, objects in the order kubectl applies them (legacy:
	// namespaces, CRDs, RBAC, ConfigMaps and Secrets, then the rest).
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), path)
	if err != nil {
		t.Fatalf("rendering %s: %v", v.name, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range m.Resources() {
		// Through JSON, as kubectl sends it: numbers become int64 or
		// float64, which unstructured objects hold.
		raw, err := r.MarshalJSON()
		obj := &unstructured.Unstructured{}
		if err == nil {
			err = obj.UnmarshalJSON(raw)
		}
		if err != nil {
			t.Fatalf("rendering %s: %s: %v", v.name, r.CurId(), err)
		}
		objs = append(objs, obj)
	}
	if len(objs) == 0 {
		t.Fatalf("rendering %s: no objects", v.name)
	}
	return objs
}

// copyDeploy copies the committed files of deploy/ (no Go files, no
// credentials an operator filled in) into a temporary directory and
// returns it.
func copyDeploy(t *testing.T) string {
	t.Helper()
	src := filepath.Join(testenv.RepoRoot(t), "deploy")
	dst := filepath.Join(t.TempDir(), "deploy")
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		switch {
		case rel == filepath.Join("production", "sless.env"), rel == filepath.Join("quickstart", "credentials"):
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		case strings.HasSuffix(rel, ".go"):
			return nil
		}
		copyFile(t, path, filepath.Join(dst, rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// copyFile copies src to dst with src's mode.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, st.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
}

// runCredentials runs the quickstart's credentials.sh of the copy of
// deploy/ at dir, as an operator does, and returns what it said.
func runCredentials(t *testing.T, dir string) string {
	t.Helper()
	out, err := runScript(filepath.Join(dir, "quickstart", "credentials.sh"))
	if err != nil {
		t.Fatalf("credentials.sh: %v\n%s", err, out)
	}
	return out
}

// runScript runs the script at path and returns its output.
func runScript(path string) (string, error) {
	out, err := exec.Command(path).CombinedOutput()
	return string(out), err
}

// checkImage reports why image is not a versioned reference: one with a
// digest, or a tag that names a version (a digit in it), never latest or
// none (which means latest).
func checkImage(image string) error {
	if strings.Contains(image, "@") {
		_, err := name.NewDigest(image, name.WeakValidation)
		return err
	}
	tag, err := name.NewTag(image, name.WeakValidation)
	if err != nil {
		return err
	}
	if !strings.HasSuffix(image, ":"+tag.TagStr()) {
		return fmt.Errorf("%q has no tag or digest", image)
	}
	if tag.TagStr() == "latest" || !strings.ContainsAny(tag.TagStr(), "0123456789") {
		return fmt.Errorf("%q: tag %q is not a version", image, tag.TagStr())
	}
	return nil
}

func TestCheckImage(t *testing.T) {
	for _, tc := range []struct {
		image string
		ok    bool
	}{
		{"registry.example.com/sless:v0.1.0", true},
		{"postgres:17.6-bookworm", true},
		{"quay.io/minio/minio:RELEASE.2025-09-07T16-13-09Z", true},
		{"localhost:5000/sless@sha256:" + strings.Repeat("a", 64), true},
		{"sless", false},
		{"localhost:5000/sless", false},
		{"sless:latest", false},
		{"sless:stable", false},
	} {
		if err := checkImage(tc.image); (err == nil) != tc.ok {
			t.Errorf("checkImage(%q) = %v; want ok %v", tc.image, err, tc.ok)
		}
	}
}

// TestEveryCRDIsInstalled: each CRD that hack/generate.sh writes into
// base/crds is in every install, so that a new kind is not left out of
// base/kustomization.yaml.
func TestEveryCRDIsInstalled(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(t), "deploy", "base", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in deploy/base/crds (%v)", err)
	}
	var want []string
	for _, f := range files {
		// controller-gen names them GROUP_PLURAL.yaml; the CRD is PLURAL.GROUP.
		group, plural, _ := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".yaml"), "_")
		want = append(want, plural+"."+group)
	}
	slices.Sort(want)
	for _, r := range renderAll(t) {
		var got []string
		for _, o := range r.ofKind("CustomResourceDefinition") {
			got = append(got, o.GetName())
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: CRDs %v; want those of deploy/base/crds, %v", r.name, got, want)
		}
	}
}
