package crane_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/buildtest"
	"sless.kube5s.ru/sless/modules/build/crane"
	"sless.kube5s.ru/sless/modules/build/crane/cranetest"
	"sless.kube5s.ru/sless/modules/build/imagecode"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/nodejs"
	"sless.kube5s.ru/sless/modules/runtime/python"
	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/storage/blobfs"
	"sless.kube5s.ru/sless/runtimes"
)

// testRegistry is go-containerregistry's in-process registry behind a
// handler that counts what is pushed and can refuse requests.
type testRegistry struct {
	host string
	mu   sync.Mutex
	// uploads counts blob uploads started (mounts excluded), manifests the
	// manifests put.
	uploads, manifests int
	// refuse, when set, answers a request instead of the registry.
	refuse func(r *http.Request) int
}

func newRegistry(t *testing.T) *testRegistry {
	t.Helper()
	reg := &testRegistry{}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reg.mu.Lock()
		refuse := reg.refuse
		switch {
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/blobs/uploads/") && r.URL.Query().Get("mount") == "":
			reg.uploads++
		case r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/"):
			reg.manifests++
		}
		reg.mu.Unlock()
		if refuse != nil {
			if code := refuse(r); code != 0 {
				if code == http.StatusUnauthorized {
					w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				}
				w.WriteHeader(code)
				return
			}
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	reg.host = strings.TrimPrefix(srv.URL, "http://")
	return reg
}

// pushes returns the blob uploads and manifest puts since the last call.
func (r *testRegistry) pushes() (uploads, manifests int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	uploads, manifests = r.uploads, r.manifests
	r.uploads, r.manifests = 0, 0
	return uploads, manifests
}

func (r *testRegistry) setRefuse(f func(*http.Request) int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refuse = f
}

type env struct {
	reg     *testRegistry
	blobs   storage.Blobs
	runtime *runtime.Registry
	cfg     crane.Config
}

// newEnv returns a registry with the python3.11 base image (not the
// nodejs20 one) and the settings of a builder that pushes to it.
func newEnv(t *testing.T) *env {
	t.Helper()
	reg := newRegistry(t)
	py := python.New()
	if err := cranetest.PushBase(reg.host+"/"+py.BaseImage(), py.ImageLayout(), runtimes.PythonServer); err != nil {
		t.Fatal(err)
	}
	reg.pushes()
	blobs, err := blobfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rts, err := runtime.NewRegistry([]runtime.Provider{py, nodejs.New()})
	if err != nil {
		t.Fatal(err)
	}
	return &env{reg: reg, blobs: blobs, runtime: rts,
		cfg: crane.Config{Repository: reg.host + "/sless/functions", CacheDir: t.TempDir()}}
}

// builder returns a builder of e.cfg with a cache of its own, as on
// another machine, unless cfg.CacheDir is set.
func (e *env) builder(t *testing.T) *crane.Builder {
	t.Helper()
	b, err := crane.New(e.cfg, e.blobs, e.runtime, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// upload stores a zip of files and returns the request of a python3.11
// build of it.
func (e *env) upload(t *testing.T, fn string, files map[string]string) build.Request {
	t.Helper()
	b, err := e.blobs.Put(context.Background(), bytes.NewReader(zipOf(t, files)))
	if err != nil {
		t.Fatal(err)
	}
	return build.Request{Namespace: "default", Function: fn, Runtime: "python3.11", Handler: "handler.handle", CodeSHA256: b.SHA256}
}

func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	data, err := cranetest.Zip(files)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

const helloPy = `def handle(event, context):
    return {"message": "hello " + str(event["name"])}
`

func pull(t *testing.T, artifact string) v1.Image {
	t.Helper()
	ref, err := name.NewDigest(artifact)
	if err != nil {
		t.Fatalf("artifact %q is not digest-pinned: %v", artifact, err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// entry is a tar entry as a layer holds it.
type entry struct {
	Mode     int64
	UID, GID int
	ModTime  int64
	Link     string
	Content  string
}

func layerEntries(t *testing.T, l v1.Layer) map[string]entry {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	got := map[string]entry{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		got[h.Name] = entry{Mode: h.Mode, UID: h.Uid, GID: h.Gid, ModTime: h.ModTime.Unix(), Link: h.Linkname, Content: string(data)}
	}
}

func TestImageHoldsTheCodeAndRunsTheWrapper(t *testing.T) {
	e := newEnv(t)
	b := e.builder(t)
	req := e.upload(t, "hello", map[string]string{"handler.py": helloPy, "bin/run.sh": "#!/bin/sh\n", "lib/util.py": "X = 1\n"})
	res, err := b.Image(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reused || !strings.HasPrefix(res.Artifact, e.cfg.Repository+"@sha256:") {
		t.Fatalf("result %+v: want a new image pinned by digest in %s", res, e.cfg.Repository)
	}
	img := pull(t, res.Artifact)
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("%d layers, want the base's and the code's", len(layers))
	}
	want := map[string]entry{
		"code/":            {Mode: 0o755},
		"code/bin/":        {Mode: 0o755},
		"code/bin/run.sh":  {Mode: 0o755, Content: "#!/bin/sh\n"},
		"code/handler.py":  {Mode: 0o644, Content: helloPy},
		"code/lib/":        {Mode: 0o755},
		"code/lib/util.py": {Mode: 0o644, Content: "X = 1\n"},
	}
	if diff := cmp.Diff(want, layerEntries(t, layers[1])); diff != "" {
		t.Errorf("code layer (-want +got):\n%s", diff)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layout := python.New().ImageLayout()
	c := cf.Config
	if diff := cmp.Diff(layout.Entrypoint(), c.Entrypoint); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"--handler", "handler.handle"}, c.Cmd); diff != "" {
		t.Errorf("cmd (-want +got):\n%s", diff)
	}
	wantEnv := append(slices.Clone(cranetest.BaseEnv), "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1")
	if diff := cmp.Diff(wantEnv, c.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if c.User != runtime.ImageUser || c.WorkingDir != runtime.ImageCodeDir {
		t.Errorf("user %q, working dir %q; want %q, %q", c.User, c.WorkingDir, runtime.ImageUser, runtime.ImageCodeDir)
	}
	wantLabels := map[string]string{"org.opencontainers.image.title": cranetest.BaseTitle, imagecode.LabelRuntime: "python3.11",
		imagecode.LabelHandler: "handler.handle", imagecode.LabelCodeSHA256: req.CodeSHA256}
	if diff := cmp.Diff(wantLabels, c.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	base, err := remote.Head(mustRef(t, e.reg.host+"/"+python.New().BaseImage()))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Annotations["org.opencontainers.image.base.digest"]; got != base.Digest.String() {
		t.Errorf("base digest annotation %q, want %s", got, base.Digest)
	}

	out := invokeImage(t, img, `{"name": "image"}`)
	if out != `{"message":"hello image"}` {
		t.Errorf("the image's handler answered %s", out)
	}
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSameCodeGivesTheSameDigestAndPushesNothing(t *testing.T) {
	e := newEnv(t)
	files := map[string]string{"handler.py": helloPy}
	first, err := e.builder(t).Image(context.Background(), e.upload(t, "one", files))
	if err != nil {
		t.Fatal(err)
	}
	if up, man := e.reg.pushes(); up != 2 || man != 1 {
		t.Errorf("first build pushed %d blobs and %d manifests; want the code layer and the config, and one manifest", up, man)
	}

	// Another function, another server with an empty cache, at another time.
	e.cfg.CacheDir = t.TempDir()
	second, err := e.builder(t).Image(context.Background(), e.upload(t, "two", files))
	if err != nil {
		t.Fatal(err)
	}
	if second.Artifact != first.Artifact || !second.Reused {
		t.Errorf("second build: %+v; want %s reused", second, first.Artifact)
	}
	if up, man := e.reg.pushes(); up != 0 || man != 0 {
		t.Errorf("second build pushed %d blobs and %d manifests; want nothing", up, man)
	}

	// The same code built anew (the image deleted meanwhile) gives the
	// same digest: nothing in it depends on when or where it was built.
	repo, err := name.NewRepository(e.cfg.Repository)
	if err != nil {
		t.Fatal(err)
	}
	tags, err := remote.List(repo)
	if err != nil || len(tags) != 1 {
		t.Fatalf("tags %v, %v; want the one of the image", tags, err)
	}
	for _, ref := range []string{repo.Tag(tags[0]).String(), first.Artifact} {
		if err := remote.Delete(mustRef(t, ref)); err != nil {
			t.Fatal(err)
		}
	}
	e.cfg.CacheDir = t.TempDir()
	third, err := e.builder(t).Image(context.Background(), e.upload(t, "three", files))
	if err != nil {
		t.Fatal(err)
	}
	if third.Artifact != first.Artifact || third.Reused {
		t.Errorf("rebuild: %+v; want %s built again", third, first.Artifact)
	}
}

// withWheels makes e's builder install from a directory of wheels only.
func withWheels(t *testing.T, e *env, pkgs ...string) {
	t.Helper()
	if _, _, err := python.New().Interpreter(context.Background()); err != nil {
		t.Skipf("python3.11 is needed to install requirements: %v", err)
	}
	dir := t.TempDir()
	for _, p := range pkgs {
		if err := cranetest.Wheel(dir, p); err != nil {
			t.Fatal(err)
		}
	}
	e.cfg.InstallEnv = []string{"PIP_NO_INDEX=1", "PIP_FIND_LINKS=" + dir}
}

const depsPy = `import tinypkg

def handle(event, context):
    return {"message": tinypkg.GREETING, "version": VERSION}

VERSION = %d
`

func TestCodeOnlyChangeReusesTheDependencyLayer(t *testing.T) {
	e := newEnv(t)
	withWheels(t, e, "tinypkg")
	b := e.builder(t)
	files := map[string]string{"handler.py": fmt.Sprintf(depsPy, 1), "requirements.txt": "tinypkg==1.0\n"}
	first, err := b.Image(context.Background(), e.upload(t, "deps", files))
	if err != nil {
		t.Fatal(err)
	}
	if up, _ := e.reg.pushes(); up != 3 {
		t.Errorf("first build pushed %d blobs; want the dependency layer, the code layer and the config", up)
	}
	img := pull(t, first.Artifact)
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 3 {
		t.Fatalf("%d layers; want the base's, the dependencies' and the code's", len(layers))
	}
	deps := layerEntries(t, layers[1])
	if got := deps["code/.deps/tinypkg/__init__.py"]; got.Content != "GREETING = 'hello from tinypkg'\n" || got.Mode != 0o644 {
		t.Errorf("dependency layer has tinypkg/__init__.py as %+v; its entries: %v", got, slices.Sorted(maps.Keys(deps)))
	}
	for n := range deps {
		if !strings.HasPrefix(n, "code/.deps/") && n != "code/" {
			t.Errorf("dependency layer has %s, outside code/.deps", n)
		}
		if strings.HasSuffix(n, ".pyc") {
			t.Errorf("dependency layer has compiled %s, which would carry the install time", n)
		}
	}
	if out := invokeImage(t, img, ""); out != `{"message":"hello from tinypkg","version":1}` {
		t.Errorf("the image's handler answered %s", out)
	}

	files["handler.py"] = fmt.Sprintf(depsPy, 2)
	second, err := b.Image(context.Background(), e.upload(t, "deps", files))
	if err != nil {
		t.Fatal(err)
	}
	if up, man := e.reg.pushes(); up != 2 || man != 1 {
		t.Errorf("code-only change pushed %d blobs and %d manifests; want the code layer and the config, and one manifest", up, man)
	}
	layers2, err := pull(t, second.Artifact).Layers()
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := layers[1].Digest()
	d2, _ := layers2[1].Digest()
	if d1 != d2 {
		t.Errorf("dependency layer changed from %s to %s with the code only", d1, d2)
	}
	if !strings.Contains(second.Log, "cached layer") {
		t.Errorf("log %q does not say the dependency layer was cached", second.Log)
	}
}

func TestBuildFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, e *env)
		files map[string]string
		req   func(*build.Request)
		// user: the code is at fault (a *build.Error); want: in the message.
		user bool
		want string
	}{
		{name: "zip bomb", files: map[string]string{"handler.py": helloPy, "big": strings.Repeat("x", 64<<10)},
			setup: func(t *testing.T, e *env) { e.cfg.Limits = safezip.Limits{MaxExtractedBytes: 32 << 10} },
			user:  true, want: "archive expands to more than 32 KiB"},
		{name: "whiteout", files: map[string]string{"handler.py": helloPy, ".wh.secret": ""},
			user: true, want: `".wh.secret": names starting with .wh. cannot be in an image`},
		{name: "unknown runtime", files: map[string]string{"handler.py": helloPy},
			req: func(r *build.Request) { r.Runtime = "cobol" }, user: true, want: "cobol"},
		{name: "unknown base image", files: map[string]string{"handler.js": "exports.handle = () => 1\n"},
			req:  func(r *build.Request) { r.Runtime = "nodejs20" },
			want: "sless-runtime-nodejs20:v0.1.0 of runtime nodejs20 is not in the registry"},
		{name: "push refused", files: map[string]string{"handler.py": helloPy},
			setup: func(t *testing.T, e *env) {
				e.reg.setRefuse(func(r *http.Request) int {
					if r.Method == http.MethodPost || r.Method == http.MethodPut {
						return http.StatusForbidden
					}
					return 0
				})
			},
			want: "the registry denied access"},
		{name: "wrong credentials", files: map[string]string{"handler.py": helloPy},
			setup: func(t *testing.T, e *env) {
				e.reg.setRefuse(requireBasic("builder", "secret"))
				e.cfg.Username, e.cfg.Password = "builder", "wrong"
			},
			want: "the registry refused the credentials"},
		{name: "no binary wheel", files: map[string]string{"handler.py": helloPy, "requirements.txt": "notthere==1.0\n"},
			setup: func(t *testing.T, e *env) { withWheels(t, e, "tinypkg") },
			user:  true, want: "pip found no binary wheel of a requirement for CPython 3.11 on linux/amd64: " +
				"pip exited with status 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if tc.setup != nil {
				tc.setup(t, e)
			}
			blob, err := e.blobs.Put(context.Background(), bytes.NewReader(zipOf(t, tc.files)))
			if err != nil {
				t.Fatal(err)
			}
			req := build.Request{Namespace: "default", Function: "f", Runtime: "python3.11", Handler: "handler.handle", CodeSHA256: blob.SHA256}
			if tc.req != nil {
				tc.req(&req)
			}
			_, err = e.builder(t).Image(context.Background(), req)
			if err == nil {
				t.Fatal("the build succeeded")
			}
			if _, user := build.AsError(err); user != tc.user {
				t.Errorf("error %q is the code's fault: %v, want %v", err, user, tc.user)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if tc.name == "no binary wheel" && !strings.Contains(err.Error(), "kaniko builder") {
				t.Errorf("error %q does not name the kaniko builder as the way out", err)
			}
		})
	}
}

// requireBasic answers 401 to requests without the basic credentials.
func requireBasic(user, pass string) func(*http.Request) int {
	return func(r *http.Request) int {
		if u, p, ok := r.BasicAuth(); ok && u == user && p == pass {
			return 0
		}
		return http.StatusUnauthorized
	}
}

func TestCredentialsFromADockerConfig(t *testing.T) {
	e := newEnv(t)
	e.reg.setRefuse(requireBasic("builder", "secret"))
	cfg := map[string]any{"auths": map[string]any{
		"other.example.com":    map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte("x:y"))},
		"http://" + e.reg.host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte("builder:secret"))},
	}}
	data, _ := json.Marshal(cfg)
	e.cfg.DockerConfig = filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(e.cfg.DockerConfig, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.builder(t).Image(context.Background(), e.upload(t, "f", map[string]string{"handler.py": helloPy})); err != nil {
		t.Fatal(err)
	}
}

// invokeImage extracts img's filesystem, runs its entrypoint there with the
// host's interpreter (paths of the image mapped into the extracted tree,
// the port replaced by a unix socket) and invokes the handler once with body.
func invokeImage(t *testing.T, img v1.Image, body string) string {
	t.Helper()
	interp, _, err := python.New().Interpreter(context.Background())
	if err != nil {
		t.Skipf("python3.11 is needed to run the image's wrapper: %v", err)
	}
	root := t.TempDir()
	extract(t, mutate.Extract(img), root)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	var args []string
	for _, a := range append(cf.Config.Entrypoint[1:], cf.Config.Cmd...) {
		switch {
		case strings.HasPrefix(a, "tcp:"):
			a = "unix:" + sock
		case strings.HasPrefix(a, "/"):
			a = filepath.Join(root, a)
		}
		args = append(args, a)
	}
	cmd := exec.Command(interp, args...)
	cmd.Env = append(cf.Config.Env, "SLESS_FUNCTION=f", "SLESS_NAMESPACE=default")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Dir = filepath.Join(root, cf.Config.WorkingDir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Post("http://fn/", "application/json", strings.NewReader(body))
		if err == nil {
			defer resp.Body.Close()
			out, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("status %d: %s", resp.StatusCode, out)
			}
			return string(out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the wrapper never answered: %v; its stderr: %s", err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline: the process starts in its own time
	}
}

// extract writes the flattened filesystem tar r into root.
func extract(t *testing.T, r io.ReadCloser, root string) {
	t.Helper()
	defer r.Close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, root+string(filepath.Separator)) {
			t.Fatalf("image entry %q escapes", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				var data []byte
				if data, err = io.ReadAll(tr); err == nil {
					err = os.WriteFile(p, data, os.FileMode(h.Mode)&0o777)
				}
			}
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		}
		if err != nil && !errors.Is(err, os.ErrExist) {
			t.Fatal(err)
		}
	}
}

// npmPackage writes name-1.0.0.tgz, an npm package whose index.js exports
// VALUE, into dir and returns its path; scripts, when set, is its
// package.json's "scripts".
func npmPackage(t *testing.T, dir, pkg, scripts string) string {
	t.Helper()
	manifest := `{"name": "` + pkg + `", "version": "1.0.0", "main": "index.js"`
	if scripts != "" {
		manifest += `, "scripts": ` + scripts
	}
	files := map[string]string{"package/package.json": manifest + "}\n", "package/index.js": "exports.VALUE = 'from " + pkg + "';\n"}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, n := range slices.Sorted(maps.Keys(files)) {
		tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg})
		io.WriteString(tw, files[n])
	}
	tw.Close()
	gz.Close()
	p := filepath.Join(dir, pkg+"-1.0.0.tgz")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNodeDependencies(t *testing.T) {
	if _, _, err := nodejs.New().Interpreter(context.Background()); err != nil {
		t.Skipf("node is needed to install package.json dependencies: %v", err)
	}
	e := newEnv(t)
	node := nodejs.New()
	if err := cranetest.PushBase(e.reg.host+"/"+node.BaseImage(), node.ImageLayout(), runtimes.NodeServer); err != nil {
		t.Fatal(err)
	}
	pkgs := t.TempDir()
	plain, scripted := npmPackage(t, pkgs, "plain", ""), npmPackage(t, pkgs, "scripted", `{"install": "node -e 1"}`)
	b := e.builder(t)
	buildWith := func(dep string) (build.Result, error) {
		t.Helper()
		req := e.upload(t, "node", map[string]string{
			"handler.js":   "const d = require('dep');\nexports.handle = () => d.VALUE;\n",
			"package.json": `{"name": "fn", "version": "1.0.0", "dependencies": {"dep": "file:` + dep + `"}}`,
		})
		req.Runtime, req.Handler = "nodejs20", "handler.handle"
		return b.Image(context.Background(), req)
	}
	res, err := buildWith(plain)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := pull(t, res.Artifact).Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 3 {
		t.Fatalf("%d layers; want the base's, the dependencies' and the code's", len(layers))
	}
	if got := layerEntries(t, layers[1])["code/node_modules/dep/index.js"]; got.Content != "exports.VALUE = 'from plain';\n" {
		t.Errorf("dependency layer has node_modules/dep/index.js as %+v", got)
	}

	_, err = buildWith(scripted)
	if _, user := build.AsError(err); !user || !strings.Contains(fmt.Sprint(err), "dep must run an install script") ||
		!strings.Contains(fmt.Sprint(err), "kaniko builder") {
		t.Errorf("package with an install script: %v; want a build error naming it and the kaniko builder", err)
	}
}

func TestUnusedDependencyLayersArePrunedAtStart(t *testing.T) {
	e := newEnv(t)
	withWheels(t, e, "tinypkg")
	for _, req := range []string{"tinypkg==1.0\n", "tinypkg\n"} {
		if _, err := e.builder(t).Image(context.Background(), e.upload(t, "f", map[string]string{"handler.py": fmt.Sprintf(depsPy, 1), "requirements.txt": req})); err != nil {
			t.Fatal(err)
		}
	}
	metas, _ := filepath.Glob(filepath.Join(e.cfg.CacheDir, "deps", "*.json"))
	if len(metas) != 2 {
		t.Fatalf("cached layers %v; want two", metas)
	}
	old := time.Now().Add(-31 * 24 * time.Hour)
	if err := os.Chtimes(metas[0], old, old); err != nil {
		t.Fatal(err)
	}
	e.builder(t)
	left, _ := filepath.Glob(filepath.Join(e.cfg.CacheDir, "deps", "*"))
	want := []string{strings.TrimSuffix(metas[1], ".json") + ".json", strings.TrimSuffix(metas[1], ".json") + ".tar.gz"}
	if diff := cmp.Diff(want, left); diff != "" {
		t.Errorf("cache after a start (-want +got):\n%s", diff)
	}
}

func TestConformance(t *testing.T) {
	buildtest.Run(t, func(t *testing.T) buildtest.Env {
		e := newEnv(t)
		b := e.builder(t)
		if err := b.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Stop(context.Background()) })
		return buildtest.Env{Builder: b, Blobs: e.blobs}
	})
}
