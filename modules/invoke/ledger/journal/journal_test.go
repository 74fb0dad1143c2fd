package journal_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"sless.kube5s.ru/sless/internal/testenv/powercut"
	"sless.kube5s.ru/sless/modules/invoke/ledger/journal"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openJournal(t testing.TB, opts journal.Options) *journal.Journal {
	t.Helper()
	if opts.Log == nil {
		opts.Log = quiet()
	}
	j, err := journal.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func appendAll(t testing.TB, j *journal.Journal, payloads ...string) {
	t.Helper()
	for _, p := range payloads {
		if err := j.Append([]byte(p)); err != nil {
			t.Fatalf("Append(%q): %v", p, err)
		}
	}
}

// readAll reads from j's start to its end and returns the payloads and the
// end position.
func readAll(t testing.TB, j *journal.Journal, from journal.Pos) ([]string, journal.Pos) {
	t.Helper()
	var got []string
	pos := from
	for {
		next, err := j.Read(pos, 3, func(p []byte) { got = append(got, string(p)) })
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if next == pos {
			return got, pos
		}
		pos = next
	}
}

func payloads(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("record-%03d-%s", i, bytes.Repeat([]byte{'x'}, i%7))
	}
	return out
}

func segments(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAppendReadCommitReopen(t *testing.T) {
	for _, sync := range []time.Duration{0, 10 * time.Millisecond} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			dir := t.TempDir()
			opts := journal.Options{Dir: dir, SyncInterval: sync, SegmentBytes: 100}
			j := openJournal(t, opts)
			want := payloads(20)
			appendAll(t, j, want[:10]...)
			got, pos := readAll(t, j, j.Start())
			if diff := cmp.Diff(want[:10], got); diff != "" {
				t.Fatalf("read back (-want +got):\n%s", diff)
			}
			if n := len(segments(t, dir)); n < 3 {
				t.Fatalf("%d segments of 100 bytes for 10 records, want several", n)
			}
			if err := j.Commit(pos); err != nil {
				t.Fatal(err)
			}
			if n := len(segments(t, dir)); n != 1 {
				t.Errorf("%d segments after committing everything, want 1 (the open one)", n)
			}
			if b := j.Behind(pos); b != 0 {
				t.Errorf("Behind(end) = %d, want 0", b)
			}
			appendAll(t, j, want[10:]...)
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}

			// The next process resumes at the checkpoint: what was
			// committed is not read again.
			j2 := openJournal(t, opts)
			got, _ = readAll(t, j2, j2.Start())
			if diff := cmp.Diff(want[10:], got); diff != "" {
				t.Errorf("after reopening (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDamage: a frame cut short by a crash, or damaged, ends its segment;
// the frames appended by the next process are read.
func TestDamage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(data []byte) []byte
		want   int
	}{
		{"torn last frame", func(d []byte) []byte { return d[:len(d)-3] }, 2},
		{"torn header", func(d []byte) []byte { return append(d, 7, 0, 0) }, 3},
		{"flipped byte in the last payload", func(d []byte) []byte { d[len(d)-1] ^= 0xff; return d }, 2},
		{"length past the end", func(d []byte) []byte { return append(d, 0xff, 0xff, 0, 0, 1, 2, 3, 4, 'x') }, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := journal.Options{Dir: dir, SyncInterval: time.Hour}
			j := openJournal(t, opts)
			appendAll(t, j, "one", "two", "three")
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			seg := segments(t, dir)[0]
			data, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(seg, tc.damage(data), 0o600); err != nil {
				t.Fatal(err)
			}
			j2 := openJournal(t, opts)
			appendAll(t, j2, "four")
			got, _ := readAll(t, j2, j2.Start())
			want := append([]string{"one", "two", "three"}[:tc.want], "four")
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestFull(t *testing.T) {
	j := openJournal(t, journal.Options{Dir: t.TempDir(), SyncInterval: time.Hour, MaxBytes: 100})
	var err error
	n := 0
	for ; n < 100 && err == nil; n++ {
		err = j.Append([]byte("0123456789"))
	}
	if !errors.Is(err, journal.ErrFull) {
		t.Fatalf("Append past MaxBytes: got %v, want ErrFull", err)
	}
	if n-1 != 100/18 {
		t.Errorf("%d frames of 18 bytes fit in 100, want %d", n-1, 100/18)
	}
	// Committing what was read frees the space.
	_, pos := readAll(t, j, j.Start())
	if err := j.Commit(pos); err != nil {
		t.Fatal(err)
	}
	if err := j.Append([]byte("0123456789")); err != nil {
		t.Errorf("Append after Commit: %v", err)
	}
}

// TestFailedWriteLeavesNothing: a write the disk refuses is cut off, so the
// frames after it read back.
func TestFailedWriteLeavesNothing(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	j := openJournal(t, journal.Options{Dir: dir, SyncInterval: time.Hour})
	big := bytes.Repeat([]byte{'b'}, 20<<10)
	var failed error
	ok := 0
	for range 10 {
		if failed = j.Append(big); failed != nil {
			break
		}
		ok++
	}
	if !errors.Is(failed, syscall.ENOSPC) {
		t.Fatalf("Append on a full tmpfs: got %v, want ENOSPC", failed)
	}
	appendAll(t, j, "small")
	var got []int
	readAll := func() {
		pos := j.Start()
		for {
			next, err := j.Read(pos, 10, func(p []byte) { got = append(got, len(p)) })
			if err != nil {
				t.Fatal(err)
			}
			if next == pos {
				return
			}
			pos = next
		}
	}
	readAll()
	want := append(make([]int, 0, ok+1), make([]int, ok)...)
	for i := range want {
		want[i] = len(big)
	}
	want = append(want, len("small"))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("payload sizes read back (-want +got):\n%s", diff)
	}
}

func TestConcurrentStrictAppends(t *testing.T) {
	j := openJournal(t, journal.Options{Dir: t.TempDir(), SyncInterval: 0, SegmentBytes: 4 << 10})
	var wg sync.WaitGroup
	const goroutines, each = 8, 50
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				if err := j.Append(fmt.Appendf(nil, "%d-%d", g, i)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	got, _ := readAll(t, j, j.Start())
	if len(got) != goroutines*each {
		t.Errorf("read %d records, want %d", len(got), goroutines*each)
	}
}

// BenchmarkAppend measures one record's append (a 400-byte payload, about an
// invocation record) from 32 goroutines, and the CPU the whole process spent
// per record, fsyncs included.
func BenchmarkAppend(b *testing.B) {
	for _, tc := range []struct {
		name string
		sync time.Duration
	}{{"sync=100ms", journal.DefaultSyncInterval}, {"sync=always", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			j := openJournal(b, journal.Options{Dir: b.TempDir(), SyncInterval: tc.sync, MaxBytes: 1 << 40})
			payload := bytes.Repeat([]byte{'r'}, 400)
			b.SetParallelism(32)
			cpu := CPUTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := j.Append(payload); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((CPUTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// BenchmarkRead measures reading records back, as the ledger's writer does.
func BenchmarkRead(b *testing.B) {
	j := openJournal(b, journal.Options{Dir: b.TempDir(), SyncInterval: time.Hour, MaxBytes: 1 << 40})
	payload := bytes.Repeat([]byte{'r'}, 400)
	for range b.N {
		if err := j.Append(payload); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	pos := j.Start()
	for n := 0; n < b.N; {
		next, err := j.Read(pos, 500, func([]byte) { n++ })
		if err != nil {
			b.Fatal(err)
		}
		pos = next
	}
}

// CPUTime is the CPU time the process used so far, user and system.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestPowerCut: what Append returned in strict mode, and what it returned
// more than an interval before the cut in interval mode, survives a power
// cut (internal/testenv/powercut), also in the first segment a process
// opened.
func TestPowerCut(t *testing.T) {
	for _, sync := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			disk := powercut.Mount(t)
			opts := journal.Options{Dir: filepath.Join(disk.Dir, "journal"), SyncInterval: sync}
			j := openJournal(t, opts)
			want := payloads(10)
			appendAll(t, j, want...)
			time.Sleep(5 * sync) // the sync loop's turn
			disk.Cut()           // without Close, which fsyncs

			j2 := openJournal(t, opts)
			got, _ := readAll(t, j2, j2.Start())
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("after a power cut (-want +got):\n%s", diff)
			}
		})
	}
}
