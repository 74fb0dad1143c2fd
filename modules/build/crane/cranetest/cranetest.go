// Package cranetest makes what tests and benchmarks of image builds need
// without a container tool: runtime base images and Python wheels.
package cranetest

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"sless.kube5s.ru/sless/modules/runtime"
)

// BaseEnv is the environment of the base images PushBase makes.
var BaseEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}

// BaseTitle is the org.opencontainers.image.title label of those images.
const BaseTitle = "base"

// PushBase pushes to ref a stand-in for the base image of a runtime with
// layout: one layer with the wrapper where the layout puts it and an
// /etc/os-release, BaseEnv and the BaseTitle label. It has no interpreter:
// a test runs the wrapper with the host's.
func PushBase(ref string, layout runtime.ImageLayout, wrapper []byte, opts ...remote.Option) error {
	files := map[string][]byte{
		strings.TrimPrefix(layout.WrapperPath(), "/"): wrapper,
		"etc/os-release": []byte("ID=test\n"),
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range slices.Sorted(maps.Keys(files)) {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(files[n]); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return err
	}
	img, err = mutate.Config(img, v1.Config{Env: BaseEnv, Labels: map[string]string{"org.opencontainers.image.title": BaseTitle}})
	if err != nil {
		return err
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	return remote.Write(r, img, opts...)
}

// Wheel writes pkg-1.0-py3-none-any.whl into dir: a pure-Python wheel whose
// module pkg has GREETING = "hello from <pkg>". pip installs it from a
// --find-links directory.
func Wheel(dir, pkg string) error {
	distInfo := pkg + "-1.0.dist-info/"
	files := map[string]string{
		pkg + "/__init__.py":  "GREETING = 'hello from " + pkg + "'\n",
		distInfo + "METADATA": "Metadata-Version: 2.1\nName: " + pkg + "\nVersion: 1.0\n",
		distInfo + "WHEEL":    "Wheel-Version: 1.0\nGenerator: sless-cranetest\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	var record strings.Builder
	for _, n := range slices.Sorted(maps.Keys(files)) {
		sum := sha256.Sum256([]byte(files[n]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", n, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[n]))
	}
	record.WriteString(distInfo + "RECORD,,\n")
	files[distInfo+"RECORD"] = record.String()
	data, err := Zip(files)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, pkg+"-1.0-py3-none-any.whl"), data, 0o644)
}

// Zip returns a zip of files (name -> content), entries in lexical order;
// names ending in .sh are executable.
func Zip(files map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range slices.Sorted(maps.Keys(files)) {
		h := &zip.FileHeader{Name: n, Method: zip.Deflate}
		h.SetMode(0o600)
		if strings.HasSuffix(n, ".sh") {
			h.SetMode(0o700)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, err
		}
		if _, err := io.WriteString(w, files[n]); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
