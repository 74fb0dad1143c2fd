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
		name     string
		blobs    blobs
		wantCopy bool
	}{
		{"local file", blobs{asFile: file}, false},
		{"stream", blobs{zip: buf.Bytes()}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			work := t.TempDir()
			dir, err := Code(context.Background(), tt.blobs, "sha", work, safezip.DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dir, "handler.py"))
			if err != nil || string(got) != "def handle(e, c): pass\n" {
				t.Errorf("handler.py: %q, %v", got, err)
			}
			_, err = os.Stat(filepath.Join(work, "code.zip"))
			if copied := err == nil; copied != tt.wantCopy {
				t.Errorf("work/code.zip written: %v, want %v", copied, tt.wantCopy)
			}
		})
	}
}
