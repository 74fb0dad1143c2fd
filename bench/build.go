package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/crane"
	"sless.kube5s.ru/sless/modules/build/crane/cranetest"
	buildlocal "sless.kube5s.ru/sless/modules/build/local"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/nodejs"
	"sless.kube5s.ru/sless/modules/runtime/python"
	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/storage/blobfs"
	"sless.kube5s.ru/sless/runtimes"
)

// buildSamples is how many builds each case of the build table measures.
var buildSamples = flag.Int("build-samples", 7, "builds measured per case of the build table")

// builds measures upload -> artifact for the crane builder (pushing to
// go-containerregistry's registry on loopback) next to the local builder,
// in process: a hello function with 1 MiB of incompressible data (a 1 MiB
// zip), the same code again, and a code-only change of a function whose
// requirements.txt installs a wheel from a local directory.
func builds(report io.Writer) error {
	tmp, err := os.MkdirTemp("", "sless-bench-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	py := python.New()
	if err := cranetest.PushBase(host+"/"+py.BaseImage(), py.ImageLayout(), runtimes.PythonServer); err != nil {
		return err
	}
	wheels := filepath.Join(tmp, "wheels")
	if err := os.Mkdir(wheels, 0o755); err != nil {
		return err
	}
	if err := cranetest.Wheel(wheels, "tinypkg"); err != nil {
		return err
	}
	blobs, err := blobfs.New(filepath.Join(tmp, "blobs"))
	if err != nil {
		return err
	}
	rts, err := runtime.NewRegistry([]runtime.Provider{py, nodejs.New()})
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cb, err := crane.New(crane.Config{Repository: host + "/sless/functions", CacheDir: filepath.Join(tmp, "crane")}, blobs, rts, quiet)
	if err != nil {
		return err
	}
	lb, err := buildlocal.New(buildlocal.Config{Dir: filepath.Join(tmp, "local")}, blobs, rts, nil, quiet)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := lb.Start(ctx); err != nil {
		return err
	}
	defer lb.Stop(ctx)
	builders := []struct {
		name  string
		build func(build.Request) (build.Result, error)
	}{
		{"crane", func(req build.Request) (build.Result, error) { return cb.Image(ctx, req) }},
		{"local", func(req build.Request) (build.Result, error) { return buildAndWait(ctx, lb, req) }},
	}
	// One build first: the crane builder resolves the base image once.
	if _, err := upload(ctx, blobs, helloFiles(), builders[0].build); err != nil {
		return err
	}
	requirements := fmt.Sprintf("--no-index\n--find-links %s\ntinypkg==1.0\n", wheels)
	type row struct{ name, target string }
	rows := []row{{"hello, 1 MiB zip, new code", "≤ 1 s"}, {"same code again", "≤ 100 ms"},
		{"code-only change, dependencies cached", "≤ 1.5 s"}, {"new requirements.txt (pip install)", "none"}}
	results := map[string][][]time.Duration{}
	for _, b := range builders {
		results[b.name] = make([][]time.Duration, len(rows))
		// The dependency layer (crane) is built once before the samples.
		if _, err := upload(ctx, blobs, depsFiles(requirements), b.build); err != nil {
			return fmt.Errorf("%s builder: %w", b.name, err)
		}
	}
	// The builders alternate, so that both see the same load.
	for i := range *buildSamples {
		logf("builds: round %d of %d", i+1, *buildSamples)
		for _, b := range builders {
			times := results[b.name]
			hello := helloFiles()
			newDeps := depsFiles(requirements + "# " + rand.Text() + "\n")
			for c, files := range []map[string]string{hello, hello, depsFiles(requirements), newDeps} {
				d, err := upload(ctx, blobs, files, b.build)
				if err != nil {
					return fmt.Errorf("%s builder: %w", b.name, err)
				}
				times[c] = append(times[c], d)
			}
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(report, "\nBuilds: upload (into the blob store) -> artifact, %d samples each, median (min-max); "+
		"crane pushes to go-containerregistry's registry on loopback; load average %s.\n\n",
		*buildSamples, strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Fprintln(report, "| case | target (crane) | crane | local |")
	fmt.Fprintln(report, "|---|---|---|---|")
	for i, r := range rows {
		fmt.Fprintf(report, "| %s | %s | %s | %s |\n", r.name, r.target, spread(results["crane"][i]), spread(results["local"][i]))
	}
	return nil
}

// upload stores files as a zip, builds it with build as a function of its
// own and returns how long both took.
func upload(ctx context.Context, blobs storage.Blobs, files map[string]string, build func(build.Request) (build.Result, error)) (time.Duration, error) {
	data, err := cranetest.Zip(files)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	blob, err := blobs.Put(ctx, bytes.NewReader(data))
	if err != nil {
		return 0, err
	}
	_, err = build(buildRequest(blob.SHA256))
	return time.Since(start), err
}

var functionSeq int

func buildRequest(sha string) build.Request {
	functionSeq++
	return build.Request{Namespace: "bench", Function: fmt.Sprintf("f%d", functionSeq), Runtime: "python3.11",
		Handler: "handler.handle", CodeSHA256: sha}
}

// buildAndWait runs a build of b to its end.
func buildAndWait(ctx context.Context, b build.Builder, req build.Request) (build.Result, error) {
	done := make(chan struct{})
	p, err := b.Build(ctx, req, func() { close(done) })
	if err != nil || p.Done {
		return p.Result, firstErr(err, p.Err)
	}
	<-done
	p, err = b.Build(ctx, req, nil)
	return p.Result, firstErr(err, p.Err)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// helloFiles is a hello handler with 1 MiB of random data: new code every
// time, and a zip of about 1 MiB.
func helloFiles() map[string]string {
	return map[string]string{
		"handler.py": "def handle(event, context):\n    return {'message': 'hello'}\n",
		"data.bin":   string(randomBytes(1 << 20)),
	}
}

// depsFiles is a handler that imports tinypkg, different every time.
func depsFiles(requirements string) map[string]string {
	return map[string]string{
		"handler.py":       fmt.Sprintf("import tinypkg\n\ndef handle(event, context):\n    return tinypkg.GREETING  # %s\n", rand.Text()),
		"requirements.txt": requirements,
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// spread is "median (min-max)" of ds.
func spread(ds []time.Duration) string {
	s := slices.Sorted(slices.Values(ds))
	return fmt.Sprintf("%s (%s-%s)", msStr(s[len(s)/2]), msStr(s[0]), msStr(s[len(s)-1]))
}
