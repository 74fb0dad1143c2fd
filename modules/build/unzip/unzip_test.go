package unzip

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"sless.kube5s.ru/sless/modules/build/safezip"
)

// blobs serves one zip, from a file (as blobfs does) or from memory (as a
// remote store's reader does).
type blobs struct {
	zip    []byte
	asFile string // when set, the zip is opened from this file
}

func (b blobs) Open(context.Context, string) (io.ReadCloser, error) {
	if b.asFile != "" {
		return os.Open(b.asFile)
	}
	return io.NopCloser(bytes.NewReader(b.zip)), nil
}

func TestCodeExtractsFromAFileInPlaceAndCopiesOtherBlobs(t *testing.T) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create("handler.py")
	w.Write([]byte("def handle(e, c): pass\n"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(file, buf.Bytes(), 0o400); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		blobs blobs
		// copyDir holds the copy: a directory where nothing can be created
		// proves that a blob is read in place.
		copyDir func(t *testing.T) string
	}{
		{"local file read in place", blobs{asFile: file}, func(t *testing.T) string { return "/proc/self" }},
		{"stream copied, the copy removed", blobs{zip: buf.Bytes()}, func(t *testing.T) string { return t.TempDir() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir, copyDir := t.TempDir(), tt.copyDir(t)
			if err := Code(context.Background(), tt.blobs, "sha", dir, filepath.Join(copyDir, "code.zip"), safezip.DefaultLimits()); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dir, "handler.py"))
			if err != nil || string(got) != "def handle(e, c): pass\n" {
				t.Errorf("handler.py: %q, %v", got, err)
			}
			if _, err := os.Stat(filepath.Join(copyDir, "code.zip")); !os.IsNotExist(err) {
				t.Errorf("the copy is left behind: stat says %v", err)
			}
		})
	}
}
