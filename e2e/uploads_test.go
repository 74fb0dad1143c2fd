package e2e

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"crypto/rand"
	"hash/crc32"
	"net/http"
	"strings"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
)

// lyingZip returns a zip whose one entry, name, declares declared bytes
// while its data inflates to actual zero bytes.
func lyingZip(t *testing.T, name string, declared, actual int) []byte {
	t.Helper()
	var data bytes.Buffer
	fw, err := flate.NewWriter(&data, flate.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	zeros := make([]byte, 1<<20)
	crc := crc32.NewIEEE()
	for left := actual; left > 0; left -= len(zeros) {
		chunk := zeros[:min(left, len(zeros))]
		fw.Write(chunk)
		crc.Write(chunk)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	raw, err := w.CreateRaw(&zip.FileHeader{Name: name, Method: zip.Deflate, CRC32: crc.Sum32(),
		CompressedSize64: uint64(data.Len()), UncompressedSize64: uint64(declared)})
	if err != nil {
		t.Fatal(err)
	}
	raw.Write(data.Bytes())
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestUploadIsCheckedBeforeItIsStored sends uploads that only inflating or
// looking for the handler's file can tell are bad, and checks that each is
// refused with a 400 that says why and leaves the function as it was.
func TestUploadIsCheckedBeforeItIsStored(t *testing.T) {
	s := startServer(t, serverOptions{})
	s.mustCLI("deploy", "../examples/hello-python", "--name", "hello", "--runtime", "python3.11")
	_, before := s.getFunction("default", "hello")
	path := "/v1/namespaces/default/functions/hello/upload"

	dirOnly := func() []byte {
		var buf bytes.Buffer
		w := zip.NewWriter(&buf)
		if _, err := w.Create("handler.py/"); err != nil {
			t.Fatal(err)
		}
		w.Close()
		return buf.Bytes()
	}
	tests := []struct {
		name string
		zip  []byte
		want []string
	}{
		{"zip bomb declaring 10 bytes", lyingZip(t, "handler.py", 10, 260<<20),
			[]string{`zip entry \"handler.py\"`, "archive expands to more than 250 MiB, the limit for extracted files"}},
		{"sizes that lie within the limit", lyingZip(t, "handler.py", 10, 1000),
			[]string{`zip entry \"handler.py\"`, "content is larger than the 10 bytes its header declares"}},
		{"handler is a directory", dirOnly(),
			[]string{"the handler file is missing", "handler.py or handler/__init__.py", "top level: handler.py/"}},
		{"empty archive", zipOf(t, nil), []string{"the handler file is missing", "in the uploaded code, which is empty"}},
		{"handler file elsewhere", zipOf(t, map[string]string{"src/handler.py": "def handle(e, c): pass\n"}),
			[]string{"the handler file is missing", "top level: src/"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := s.api("POST", path, "application/zip", tt.zip)
			if code != http.StatusBadRequest {
				t.Errorf("HTTP %d %s; want 400", code, body)
			}
			for _, want := range tt.want {
				if !strings.Contains(string(body), want) {
					t.Errorf("body %s lacks %q", body, want)
				}
			}
			_, after := s.getFunction("default", "hello")
			if after.CodeSHA256 != before.CodeSHA256 || after.Generation != before.Generation || after.Status.Phase != "Ready" {
				t.Errorf("the refused upload changed the function:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

// TestUploadFailingOnTheServerIs5xx makes the spool file of an upload hit
// the server's file size limit: the failure is the server's, so the answer
// is a 500 that leaks no path, the log has the cause, and the function is
// unchanged.
func TestUploadFailingOnTheServerIs5xx(t *testing.T) {
	dataDir := t.TempDir()
	// 2048 blocks is 1 or 2 MiB: room for the database, not for the upload.
	s := startServer(t, serverOptions{dataDir: dataDir, maxFileBlocks: 2048})
	code, body := s.api("POST", "/v1/namespaces/default/functions", "application/json", []byte(`{"name": "big", "runtime": "python3.11"}`))
	if code != http.StatusCreated {
		t.Fatalf("create: HTTP %d %s", code, body)
	}
	// Random content does not compress: the zip is as large as the file.
	content := make([]byte, 4<<20)
	rand.Read(content)
	code, body = s.api("POST", "/v1/namespaces/default/functions/big/upload", "application/zip",
		zipOf(t, map[string]string{"handler.py": "def handle(e, c): pass\n", "data.bin": string(content)}))
	if code != http.StatusInternalServerError {
		t.Errorf("upload: HTTP %d %s; want 500", code, body)
	}
	if strings.Contains(string(body), "/") {
		t.Errorf("upload: the answer %s shows a path", body)
	}
	testenv.Eventually(t, 10*time.Second, "the server log says why the upload failed", func() bool {
		return strings.Contains(s.logs.String(), "file too large")
	})
	if _, fn := s.getFunction("default", "big"); fn.CodeSHA256 != "" {
		t.Errorf("the failed upload was stored: %+v", fn)
	}
}

// TestBuildFailingOnTheServerShowsNoPath extracts code whose file outgrows
// the server's file size limit: the build fails for a reason of the
// server's, so the status says so without the paths of the server's disk.
func TestBuildFailingOnTheServerShowsNoPath(t *testing.T) {
	s := startServer(t, serverOptions{maxFileBlocks: 2048})
	code, body := s.api("POST", "/v1/namespaces/default/functions", "application/json", []byte(`{"name": "big", "runtime": "python3.11"}`))
	if code != http.StatusCreated {
		t.Fatalf("create: HTTP %d %s", code, body)
	}
	// 4 MiB of zeros: a few KiB to upload and store, too large to extract.
	code, body = s.api("POST", "/v1/namespaces/default/functions/big/upload", "application/zip",
		zipOf(t, map[string]string{"handler.py": "def handle(e, c): pass\n", "zeros.bin": strings.Repeat("\x00", 4<<20)}))
	if code != http.StatusAccepted {
		t.Fatalf("upload: HTTP %d %s", code, body)
	}
	fn := s.waitFunction("default", "big", "the build to fail", func(fn function) bool { return fn.Status.Phase == "Failed" })
	if strings.Contains(fn.Status.Message, "/") || !strings.Contains(fn.Status.Message, "internal error") {
		t.Errorf("status message %q; want the generic message of a server-side failure, without paths", fn.Status.Message)
	}
	testenv.Eventually(t, 10*time.Second, "the server log says why the build failed", func() bool {
		return strings.Contains(s.logs.String(), "file too large")
	})
}
