// Package journal is an append-only log of records on local disk: the
// invocation ledger puts each record here before the invocation is answered,
// and drains it into the database afterwards.
//
// The journal is a directory of segment files, named by their sequence
// number in hex, and a checkpoint file. Each record is one frame: its
// payload's length and CRC-32C (4 bytes each, little endian), then the
// payload. Append writes a frame with one write(2), so that once it returns
// the record survives the process being killed; it survives a power loss
// once fsynced, which happens within Options.SyncInterval, or before Append
// returns when that is zero (concurrent appends then share one fsync).
//
// A frame cut short by a crash, or damaged, ends its segment for the reader:
// it never reached a caller as written. The process that opens a journal
// never appends to a segment it did not create, so a torn tail is never
// followed by new frames.
//
// One consumer reads frames in order (Read) and tells the journal when
// everything before a position is stored elsewhere (Commit): the segments
// before it are removed and the position is kept in the checkpoint, where
// the next Open resumes. The checkpoint is not fsynced; after a power loss
// the consumer may read again what it had committed, so it must be
// idempotent.
package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"sless.kube5s.ru/sless/internal/durable"
	"sless.kube5s.ru/sless/internal/rawio"
)

// Defaults of Options.
const (
	DefaultSyncInterval = 100 * time.Millisecond
	DefaultSegmentBytes = 8 << 20
	DefaultMaxBytes     = 1 << 30
)

const (
	frameHeader = 8
	// maxPayload bounds a frame's payload: a length beyond it is damage.
	maxPayload = 64 << 20
	// readChunk is how much Read reads at a time.
	readChunk      = 1 << 20
	segSuffix      = ".seg"
	checkpointName = "checkpoint"
)

// ErrFull is returned (wrapped) by Append when the journal holds MaxBytes.
var ErrFull = errors.New("the invocation journal is full")

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("the invocation journal is closed")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Options configure a Journal.
type Options struct {
	// Dir is the journal's directory, created when missing.
	Dir string
	// SyncInterval is how often written frames are fsynced; 0 fsyncs before
	// Append returns (configuration defaults to DefaultSyncInterval).
	SyncInterval time.Duration
	// SegmentBytes is the size at which a new segment starts; 0 means
	// DefaultSegmentBytes.
	SegmentBytes int64
	// MaxBytes bounds the bytes not yet committed; Append fails with
	// ErrFull beyond it. The journal takes up to one segment more on disk.
	// 0 means DefaultMaxBytes.
	MaxBytes int64
	// Log receives fsync failures and skipped damage; nil means
	// slog.Default().
	Log *slog.Logger
}

// Pos is a position in the journal: a segment and an offset in it.
type Pos struct {
	Seg uint64
	Off int64
}

// Less reports whether p is before q.
func (p Pos) Less(q Pos) bool { return p.Seg < q.Seg || p.Seg == q.Seg && p.Off < q.Off }

// Journal is an open journal. Append is safe for concurrent use; Read and
// Commit are for one consumer.
type Journal struct {
	opts Options
	log  *slog.Logger

	mu sync.Mutex
	// f is the segment being appended to, w its raw writer (an append is on
	// an invocation's path), seg its number, size its length.
	f      *os.File
	w      *rawio.File
	seg    uint64
	size   int64
	buf    []byte
	closed bool
	// sizes holds the lengths of the segments on disk, the open one
	// included; total is their sum.
	sizes map[uint64]int64
	total int64
	// committed is the last Commit's position: the bytes before it no
	// longer count against MaxBytes.
	committed Pos
	// unsynced are rotated segments not fsynced yet (interval mode).
	unsynced []*os.File
	dirty    bool

	// syncMu serializes the fsyncs and whole Sync calls, so that a Sync
	// returns only after any fsync in flight; synced is the end of what is
	// fsynced.
	syncMu sync.Mutex
	synced Pos

	notify chan struct{}
	stop   chan struct{}
	done   chan struct{}

	// The consumer's side.
	start Pos
	rf    *os.File
	rseg  uint64
	rbuf  []byte
}

// Open opens the journal in opts.Dir and starts a new segment to append to.
func Open(opts Options) (*Journal, error) {
	opts.SyncInterval = max(opts.SyncInterval, 0)
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = DefaultSegmentBytes
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if err := durable.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the invocation journal's directory: %w", err)
	}
	j := &Journal{opts: opts, log: opts.Log, sizes: map[uint64]int64{},
		notify: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	segs, err := j.listSegments()
	if err != nil {
		return nil, err
	}
	for _, s := range segs {
		fi, err := os.Stat(j.segPath(s))
		if err != nil {
			return nil, fmt.Errorf("reading the invocation journal: %w", err)
		}
		j.sizes[s] = fi.Size()
		j.total += fi.Size()
	}
	next := uint64(1)
	if len(segs) > 0 {
		next = segs[len(segs)-1] + 1
		j.start = Pos{Seg: segs[0]}
	} else {
		j.start = Pos{Seg: next}
	}
	if cp, ok := j.readCheckpoint(); ok && j.start.Less(cp) {
		if _, exists := j.sizes[cp.Seg]; exists {
			j.start = cp
		}
	}
	if err := j.openSegment(next); err != nil {
		return nil, err
	}
	// Fsyncing a frame saves it only if the segment's directory entry is
	// saved too; in interval mode as well, or a power cut before the first
	// rotation loses the whole segment, not just the last interval.
	if err := syncDir(opts.Dir); err != nil {
		j.f.Close()
		return nil, err
	}
	j.synced = Pos{Seg: next}
	go j.syncLoop()
	return j, nil
}

func (j *Journal) segPath(seg uint64) string {
	return filepath.Join(j.opts.Dir, fmt.Sprintf("%016x%s", seg, segSuffix))
}

func (j *Journal) listSegments() ([]uint64, error) {
	entries, err := os.ReadDir(j.opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("reading the invocation journal: %w", err)
	}
	var segs []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), segSuffix)
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(name, 16, 64); err == nil {
			segs = append(segs, n)
		}
	}
	slices.Sort(segs)
	return segs, nil
}

// openSegment creates segment seq and makes it the one appended to. The
// caller holds mu, or has not published j yet.
func (j *Journal) openSegment(seq uint64) error {
	f, err := os.OpenFile(j.segPath(seq), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("creating an invocation journal segment: %w", err)
	}
	w, err := rawio.NewFile(f)
	if err != nil {
		f.Close()
		return fmt.Errorf("creating an invocation journal segment: %w", err)
	}
	j.f, j.w, j.seg, j.size = f, w, seq, 0
	j.sizes[seq] = 0
	return nil
}

// Append writes payload as one frame. It returns once the frame reached the
// kernel, or the disk when SyncInterval is 0. A failed write leaves nothing
// behind; ErrFull says the journal reached MaxBytes.
func (j *Journal) Append(payload []byte) error {
	if len(payload) > maxPayload {
		return fmt.Errorf("an invocation record of %d bytes exceeds the journal's limit of %d", len(payload), maxPayload)
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	if j.f == nil {
		if err := j.openSegment(j.seg + 1); err != nil {
			j.mu.Unlock()
			return fmt.Errorf("writing to the invocation journal: %w", err)
		}
	}
	n := int64(frameHeader + len(payload))
	if j.total-j.committedBytes()+n > j.opts.MaxBytes {
		j.mu.Unlock()
		return fmt.Errorf("%w (%d bytes)", ErrFull, j.opts.MaxBytes)
	}
	if j.size > 0 && j.size+n > j.opts.SegmentBytes {
		if err := j.rotate(); err != nil {
			j.mu.Unlock()
			return err
		}
	}
	j.buf = binary.LittleEndian.AppendUint32(j.buf[:0], uint32(len(payload)))
	j.buf = binary.LittleEndian.AppendUint32(j.buf, crc32.Checksum(payload, castagnoli))
	j.buf = append(j.buf, payload...)
	if _, err := j.w.Write(j.buf); err != nil {
		// A short write (a full disk) must not stay in front of the next
		// frame.
		if terr := j.f.Truncate(j.size); terr != nil {
			j.log.Error("cutting a failed write off the invocation journal failed; starting a new segment", "error", terr)
			if rerr := j.rotate(); rerr != nil {
				// Frames after the torn one would be unreadable; refuse
				// until a segment can be started.
				j.closedByError()
			}
		}
		j.mu.Unlock()
		return fmt.Errorf("writing to the invocation journal: %w", err)
	}
	j.size += n
	j.sizes[j.seg] = j.size
	j.total += n
	j.dirty = j.opts.SyncInterval > 0
	end := Pos{Seg: j.seg, Off: j.size}
	if cap(j.buf) > 1<<20 {
		j.buf = nil // keep no large record's buffer
	}
	j.mu.Unlock()
	select {
	case j.notify <- struct{}{}:
	default:
	}
	if j.opts.SyncInterval == 0 {
		return j.syncTo(end)
	}
	return nil
}

// committedBytes is how many bytes on disk are before the last Commit. The
// caller holds mu.
func (j *Journal) committedBytes() int64 {
	if _, ok := j.sizes[j.committed.Seg]; ok {
		return j.committed.Off
	}
	return 0
}

// closedByError leaves the journal without a segment to append to; the
// next Append tries to start one. The caller holds mu.
func (j *Journal) closedByError() {
	j.f.Close()
	j.f = nil
}

// rotate starts the next segment. The caller holds mu. The old segment is
// closed by the sync loop; in strict mode it is fsynced here first, so
// that a syncTo that finds it rotated knows it is on disk.
func (j *Journal) rotate() error {
	old := j.f
	if old != nil && j.opts.SyncInterval == 0 {
		if err := old.Sync(); err != nil {
			return fmt.Errorf("syncing the invocation journal: %w", err)
		}
	}
	if err := j.openSegment(j.seg + 1); err != nil {
		return err
	}
	if j.opts.SyncInterval == 0 {
		if err := syncDir(j.opts.Dir); err != nil {
			return err
		}
	}
	if old != nil {
		j.unsynced = append(j.unsynced, old)
	}
	return nil
}

// syncTo returns once everything up to end is fsynced, fsyncing when no
// concurrent call has. Lock order: syncMu, then mu.
func (j *Journal) syncTo(end Pos) error {
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	if !j.synced.Less(end) {
		return nil
	}
	j.mu.Lock()
	f, at := j.f, Pos{Seg: j.seg, Off: j.size}
	j.mu.Unlock()
	if f == nil {
		return errors.New("syncing the invocation journal: no open segment")
	}
	// A segment closed meanwhile was rotated, which fsynced it.
	if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("syncing the invocation journal: %w", err)
	}
	if j.synced.Less(at) {
		j.synced = at
	}
	return nil
}

// syncLoop fsyncs in interval mode, and closes rotated segments.
func (j *Journal) syncLoop() {
	defer close(j.done)
	interval := j.opts.SyncInterval
	if interval == 0 {
		// Only rotated segments to close.
		interval = DefaultSyncInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-t.C:
			if err := j.Sync(); err != nil {
				j.log.Error("syncing the invocation journal failed; retrying", "error", err)
			}
		}
	}
}

// Sync fsyncs everything appended so far. It returns once that is on disk,
// also when a concurrent Sync does the fsync: calls are serialized, so a
// call never finds the journal clean while another's fsync is in flight.
func (j *Journal) Sync() error {
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	j.mu.Lock()
	dirty, rotated := j.dirty, j.unsynced
	j.dirty, j.unsynced = false, nil
	f, at := j.f, Pos{Seg: j.seg, Off: j.size}
	j.mu.Unlock()
	var errs []error
	for _, old := range rotated {
		errs = append(errs, old.Sync(), old.Close())
	}
	if len(rotated) > 0 {
		errs = append(errs, durable.SyncDir(j.opts.Dir))
	}
	if dirty && f != nil {
		err := f.Sync()
		if err == nil && j.synced.Less(at) {
			j.synced = at
		}
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		j.mu.Lock()
		j.dirty = true
		j.mu.Unlock()
		return fmt.Errorf("syncing the invocation journal: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	if err := durable.SyncDir(dir); err != nil {
		return fmt.Errorf("syncing the invocation journal: %w", err)
	}
	return nil
}

// Close fsyncs and closes the journal; Append fails afterwards, Read and
// Commit still work.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	j.mu.Unlock()
	close(j.stop)
	<-j.done
	err := j.Sync()
	j.mu.Lock()
	if j.f != nil {
		err = errors.Join(err, j.f.Close())
	}
	j.mu.Unlock()
	return err
}

// Notify returns a channel that receives after an Append.
func (j *Journal) Notify() <-chan struct{} { return j.notify }

// Start is where the consumer resumes: the checkpoint of the last Commit,
// or the oldest segment's start.
func (j *Journal) Start() Pos { return j.start }

// End is the position after the last appended frame.
func (j *Journal) End() Pos {
	j.mu.Lock()
	defer j.mu.Unlock()
	return Pos{Seg: j.seg, Off: j.size}
}

// Bytes is the journal's size on disk.
func (j *Journal) Bytes() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.total
}

// Behind is how many bytes of frames lie at or after pos.
func (j *Journal) Behind(pos Pos) int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	var n int64
	for s, size := range j.sizes {
		switch {
		case s > pos.Seg:
			n += size
		case s == pos.Seg:
			n += max(size-pos.Off, 0)
		}
	}
	return n
}

// Read calls fn with the payloads of up to limit frames from pos, in order,
// and returns the position after the last one. fn must not keep payload.
// A damaged or torn frame ends its segment: Read logs it and goes on with
// the next segment.
func (j *Journal) Read(pos Pos, limit int, fn func(payload []byte)) (Pos, error) {
	for n := 0; n < limit; {
		j.mu.Lock()
		end, known := j.sizes[pos.Seg]
		last := pos.Seg >= j.seg
		j.mu.Unlock()
		if !known && !last {
			// A segment that is gone (or never was): go on with the next.
			pos = Pos{Seg: pos.Seg + 1}
			continue
		}
		if pos.Off >= end {
			if last {
				return pos, nil
			}
			pos = Pos{Seg: pos.Seg + 1}
			continue
		}
		next, read, err := j.readSegment(pos, end, limit-n, fn)
		if err != nil {
			return pos, err
		}
		n += read
		pos = next
	}
	return pos, nil
}

// readSegment reads frames of segment pos.Seg between pos.Off and end.
func (j *Journal) readSegment(pos Pos, end int64, limit int, fn func([]byte)) (Pos, int, error) {
	if j.rf == nil || j.rseg != pos.Seg {
		if j.rf != nil {
			j.rf.Close()
			j.rf = nil
		}
		f, err := os.Open(j.segPath(pos.Seg))
		if err != nil {
			return pos, 0, fmt.Errorf("reading the invocation journal: %w", err)
		}
		j.rf, j.rseg = f, pos.Seg
	}
	want := min(end-pos.Off, int64(max(readChunk, cap(j.rbuf))))
	if cap(j.rbuf) < int(want) {
		j.rbuf = make([]byte, want)
	}
	buf := j.rbuf[:want]
	got, err := j.rf.ReadAt(buf, pos.Off)
	if err != nil && err != io.EOF {
		return pos, 0, fmt.Errorf("reading the invocation journal: %w", err)
	}
	buf = buf[:got]
	n := 0
	for n < limit {
		if len(buf) < frameHeader {
			if n == 0 {
				return j.damaged(pos, end, n, "a frame's header is cut short")
			}
			break
		}
		size := int64(binary.LittleEndian.Uint32(buf))
		if size > maxPayload || pos.Off+frameHeader+size > end {
			return j.damaged(pos, end, n, "a frame runs past the end of its segment")
		}
		if int64(len(buf)) < frameHeader+size {
			if n == 0 {
				// A frame larger than the buffer: read it whole.
				j.rbuf = make([]byte, frameHeader+size)
				return j.readSegment(pos, end, limit, fn)
			}
			break
		}
		payload := buf[frameHeader : frameHeader+size]
		if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(buf[4:]) {
			return j.damaged(pos, end, n, "a frame's checksum does not match")
		}
		fn(payload)
		n++
		buf = buf[frameHeader+size:]
		pos.Off += frameHeader + size
	}
	return pos, n, nil
}

// damaged skips the rest of a segment from pos, where a frame is torn or
// damaged. Only segments of earlier processes can have one: their last
// write may have been cut short by a crash.
func (j *Journal) damaged(pos Pos, end int64, n int, why string) (Pos, int, error) {
	j.log.Warn("skipping the damaged end of an invocation journal segment: a write was cut short (a crash) or the disk damaged it",
		"segment", filepath.Base(j.segPath(pos.Seg)), "offset", pos.Off, "bytes", end-pos.Off, "reason", why)
	j.mu.Lock()
	if pos.Seg != j.seg {
		// Frames past the damage are not read; set the segment's length
		// to where they start so Behind stops counting them.
		j.total -= j.sizes[pos.Seg] - pos.Off
		j.sizes[pos.Seg] = pos.Off
	}
	j.mu.Unlock()
	return Pos{Seg: pos.Seg + 1}, n, nil
}

// Commit records that everything before pos is stored elsewhere: the
// segments before pos.Seg are removed, and the next Open resumes at pos.
func (j *Journal) Commit(pos Pos) error {
	var errs []error
	j.mu.Lock()
	var gone []uint64
	for s := range j.sizes {
		if s < pos.Seg {
			gone = append(gone, s)
		}
	}
	j.mu.Unlock()
	slices.Sort(gone)
	for _, s := range gone {
		if j.rf != nil && j.rseg == s {
			j.rf.Close()
			j.rf = nil
		}
		if err := os.Remove(j.segPath(s)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing a drained invocation journal segment: %w", err))
			continue
		}
		j.mu.Lock()
		j.total -= j.sizes[s]
		delete(j.sizes, s)
		j.mu.Unlock()
	}
	j.mu.Lock()
	j.committed = pos
	j.mu.Unlock()
	errs = append(errs, j.writeCheckpoint(pos))
	return errors.Join(errs...)
}

// The checkpoint is 20 bytes: segment, offset, CRC-32C of the 16 before.
func (j *Journal) writeCheckpoint(pos Pos) error {
	b := binary.LittleEndian.AppendUint64(nil, pos.Seg)
	b = binary.LittleEndian.AppendUint64(b, uint64(pos.Off))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	f, err := os.OpenFile(filepath.Join(j.opts.Dir, checkpointName), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("writing the invocation journal's checkpoint: %w", err)
	}
	_, err = f.WriteAt(b, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the invocation journal's checkpoint: %w", err)
	}
	return nil
}

func (j *Journal) readCheckpoint() (Pos, bool) {
	b, err := os.ReadFile(filepath.Join(j.opts.Dir, checkpointName))
	if err != nil || len(b) != 20 || crc32.Checksum(b[:16], castagnoli) != binary.LittleEndian.Uint32(b[16:]) {
		return Pos{}, false
	}
	return Pos{Seg: binary.LittleEndian.Uint64(b), Off: int64(binary.LittleEndian.Uint64(b[8:]))}, true
}
