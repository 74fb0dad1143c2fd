// Package blobtest is the conformance suite every storage.Blobs
// implementation runs from its tests, so that all of them honour the same
// contract.
package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"

	"sless.kube5s.ru/sless/modules/storage"
)

// Run checks that the stores made by newStore implement storage.Blobs.
// newStore is called once per subtest, from parallel subtests, and returns an
// empty store; it registers its own cleanup with t.Cleanup and may skip t when
// its backend is unavailable.
//
// Cost: the subtests keep about 60 MiB in memory at peak (the Large blob and
// its read-back) and take under a second against a local disk or a loopback
// versitygw.
func Run(t *testing.T, newStore func(t *testing.T) storage.Blobs) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s storage.Blobs)
	}{
		{"RoundTrip", testRoundTrip},
		{"PutTwice", testPutTwice},
		{"Empty", testEmpty},
		{"Large", testLarge},
		{"Missing", testMissing},
		{"InvalidKey", testInvalidKey},
		{"DeleteThenOpen", testDeleteThenOpen},
		{"DeleteMissing", testDeleteMissing},
		{"FailingReader", testFailingReader},
		{"CancelledContext", testCancelledContext},
		{"CancelledMidway", testCancelledMidway},
		{"Concurrent", testConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

// largeSize is the size of the blob in the Large subtest: above the 16 MiB
// at which S3 clients switch to multipart uploads.
const largeSize = 20 << 20

func testRoundTrip(t *testing.T, s storage.Blobs) {
	data := content(1, 100_000)
	got := put(t, s, data)
	check(t, s, got, data)
}

func testPutTwice(t *testing.T, s storage.Blobs) {
	data := content(2, 1000)
	first := put(t, s, data)
	second := put(t, s, data)
	if first != second {
		t.Fatalf("second Put of the same content = %+v, first = %+v", second, first)
	}
	check(t, s, second, data)
}

func testEmpty(t *testing.T, s storage.Blobs) {
	got := put(t, s, nil)
	if got.SHA256 != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("Put(empty).SHA256 = %s", got.SHA256)
	}
	check(t, s, got, nil)
}

func testLarge(t *testing.T, s storage.Blobs) {
	data := content(3, largeSize)
	got := put(t, s, data)
	check(t, s, got, data)
}

func testMissing(t *testing.T, s storage.Blobs) {
	key := keyOf(content(4, 10))
	if rc, err := s.Open(t.Context(), key); !errors.Is(err, storage.ErrNotFound) {
		closeIfOpen(rc)
		t.Errorf("Open(missing) error = %v, want ErrNotFound", err)
	}
	if b, err := s.Stat(t.Context(), key); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Stat(missing) = %+v, %v, want ErrNotFound", b, err)
	}
}

// invalidKeys are not 64 lower-case hex digits; several would escape a
// directory or address another object if used unchecked.
var invalidKeys = []string{
	"",
	"abc",
	"E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
	"../../../../../../../../../../../../../../../../../../etc/passwd",
	"../" + keyOf(nil)[3:],
	"e3/" + keyOf(nil)[3:],
	keyOf(nil)[:63] + "\x00",
	keyOf(nil) + "0",
	keyOf(nil)[:63] + "g",
}

func testInvalidKey(t *testing.T, s storage.Blobs) {
	put(t, s, nil) // something a sloppy implementation could find
	for _, key := range invalidKeys {
		if rc, err := s.Open(t.Context(), key); err == nil {
			rc.Close()
			t.Errorf("Open(%q) succeeded", key)
		}
		if b, err := s.Stat(t.Context(), key); err == nil {
			t.Errorf("Stat(%q) = %+v, want an error", key, b)
		}
		if err := s.Delete(t.Context(), key); err == nil {
			t.Errorf("Delete(%q) succeeded, want an error", key)
		}
	}
}

func testDeleteThenOpen(t *testing.T, s storage.Blobs) {
	b := put(t, s, content(5, 1000))
	if err := s.Delete(t.Context(), b.SHA256); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if rc, err := s.Open(t.Context(), b.SHA256); !errors.Is(err, storage.ErrNotFound) {
		closeIfOpen(rc)
		t.Errorf("Open after Delete: error = %v, want ErrNotFound", err)
	}
	if _, err := s.Stat(t.Context(), b.SHA256); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Stat after Delete: error = %v, want ErrNotFound", err)
	}
}

func testDeleteMissing(t *testing.T, s storage.Blobs) {
	key := keyOf(content(6, 10))
	for i := range 2 {
		if err := s.Delete(t.Context(), key); err != nil {
			t.Fatalf("Delete #%d of a missing blob: %v", i+1, err)
		}
	}
}

// errReader is the error failingReader injects.
var errReader = errors.New("blobtest: injected read error")

// failingReader returns its data, then errReader instead of EOF.
type failingReader struct{ r io.Reader }

func (f failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, errReader
	}
	return n, err
}

func testFailingReader(t *testing.T, s storage.Blobs) {
	data := content(7, 2<<20)
	half := data[:len(data)/2]
	_, err := s.Put(t.Context(), failingReader{bytes.NewReader(half)})
	if !errors.Is(err, errReader) {
		t.Fatalf("Put with a failing reader: error = %v, want it to wrap %v", err, errReader)
	}
	assertAbsent(t, s, half, data)
}

func testCancelledContext(t *testing.T, s storage.Blobs) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	data := content(8, 1000)
	if _, err := s.Put(ctx, bytes.NewReader(data)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a cancelled context: error = %v, want context.Canceled", err)
	}
	assertAbsent(t, s, data)
}

// cancellingReader cancels a context after its first read, as a client
// disconnecting in the middle of an upload does.
type cancellingReader struct {
	r      io.Reader
	cancel context.CancelFunc
}

func (c cancellingReader) Read(p []byte) (int, error) {
	defer c.cancel()
	return c.r.Read(p)
}

func testCancelledMidway(t *testing.T, s storage.Blobs) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	data := content(9, 2<<20)
	_, err := s.Put(ctx, cancellingReader{bytes.NewReader(data), cancel})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Put cancelled midway: error = %v, want context.Canceled", err)
	}
	assertAbsent(t, s, data)
}

func testConcurrent(t *testing.T, s storage.Blobs) {
	const n = 16
	same := content(10, 300_000)
	inputs := make([][]byte, n)
	for i := range inputs {
		inputs[i] = same
		if i%2 == 1 {
			inputs[i] = content(uint64(100+i), 300_000)
		}
	}
	got := make([]storage.Blob, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, data := range inputs {
		wg.Go(func() {
			got[i], errs[i] = s.Put(t.Context(), onlyReader{bytes.NewReader(data)})
		})
	}
	wg.Wait()
	for i, data := range inputs {
		if errs[i] != nil {
			t.Errorf("Put #%d: %v", i, errs[i])
			continue
		}
		check(t, s, got[i], data)
	}
}

// onlyReader hides every method but Read, so stores see a stream of unknown
// length, as from a network connection.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// put stores data, streamed, and checks the returned Blob.
func put(t *testing.T, s storage.Blobs, data []byte) storage.Blob {
	t.Helper()
	b, err := s.Put(t.Context(), onlyReader{bytes.NewReader(data)})
	if err != nil {
		t.Fatalf("Put(%d bytes): %v", len(data), err)
	}
	if want := blobOf(data); b != want {
		t.Fatalf("Put(%d bytes) = %+v, want %+v", len(data), b, want)
	}
	return b
}

// check asserts that blob b is stored with content data.
func check(t *testing.T, s storage.Blobs, b storage.Blob, data []byte) {
	t.Helper()
	if err := checkStored(t.Context(), s, b, data); err != nil {
		t.Error(err)
	}
}

func checkStored(ctx context.Context, s storage.Blobs, b storage.Blob, data []byte) error {
	if got, err := s.Stat(ctx, b.SHA256); err != nil || got != b {
		return fmt.Errorf("Stat(%s) = %+v, %v; want %+v", b.SHA256, got, err, b)
	}
	rc, err := s.Open(ctx, b.SHA256)
	if err != nil {
		return fmt.Errorf("Open(%s): %v", b.SHA256, err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("read %s: %v", b.SHA256, err)
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("content of %s: got %d bytes (sha256 %s), want %d bytes", b.SHA256, len(got), keyOf(got), len(data))
	}
	return nil
}

// assertAbsent asserts that none of the contents is stored.
func assertAbsent(t *testing.T, s storage.Blobs, contents ...[]byte) {
	t.Helper()
	for _, data := range contents {
		key := keyOf(data)
		if b, err := s.Stat(t.Context(), key); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Stat(%s) (%d bytes that must not be stored) = %+v, %v; want ErrNotFound", key, len(data), b, err)
		}
	}
}

func closeIfOpen(rc io.ReadCloser) {
	if rc != nil {
		rc.Close()
	}
}

// content returns n pseudo-random bytes, the same for the same seed.
func content(seed uint64, n int) []byte {
	var key [32]byte
	key[0] = byte(seed)
	key[1] = byte(seed >> 8)
	data := make([]byte, n)
	rand.NewChaCha8(key).Read(data)
	return data
}

func keyOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func blobOf(data []byte) storage.Blob {
	return storage.Blob{SHA256: keyOf(data), Size: int64(len(data))}
}
