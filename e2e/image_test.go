package e2e

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"sless.kube5s.ru/sless/modules/build/crane/cranetest"
	"sless.kube5s.ru/sless/modules/build/imagecode"
	"sless.kube5s.ru/sless/modules/runtime/python"
	"sless.kube5s.ru/sless/runtimes"
)

// TestImageBuild runs `sless image build` against a registry on loopback:
// the image is pushed, pinned by digest, and a second build of the same
// code pushes nothing and prints the same reference.
func TestImageBuild(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	py := python.New()
	if err := cranetest.PushBase(host+"/"+py.BaseImage(), py.ImageLayout(), runtimes.PythonServer); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "handler.py"), []byte("def handle(event, context):\n    return 'hi'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	run := func() (string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary, "image", "build", dir, "--runtime", "python3.11",
			"--image", host+"/sless/functions", "--cache-dir", cache)
		cmd.Env = append(cleanEnv(), "HOME="+t.TempDir())
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("sless image build: %v\n%s", err, errOut.String())
		}
		return strings.TrimSpace(out.String()), errOut.String()
	}
	ref, progress := run()
	if !strings.Contains(progress, "pushing image") || !strings.Contains(progress, "pushed (") {
		t.Errorf("progress does not show the push:\n%s", progress)
	}
	d, err := name.NewDigest(ref)
	if err != nil || d.Context().String() != host+"/sless/functions" {
		t.Fatalf("printed %q (%v); want a digest-pinned reference in %s/sless/functions", ref, err, host)
	}
	img, err := remote.Image(d)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.Labels[imagecode.LabelRuntime] != "python3.11" || len(cf.Config.Labels[imagecode.LabelCodeSHA256]) != 64 {
		t.Errorf("labels %v; want the runtime and the code's SHA-256", cf.Config.Labels)
	}

	again, progress := run()
	if again != ref || !strings.Contains(progress, "nothing pushed") {
		t.Errorf("second build printed %q with\n%s\nwant %s and nothing pushed", again, progress, ref)
	}
}
