package sqldb

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gorm.io/gorm"

	"sless.kube5s.ru/sless/internal/durable"
)

// commits runs a SQLite database's writes one at a time and makes them
// durable in groups; Open installs it on every SQLite database as a gorm
// plugin.
//
// One writer at a time is all SQLite allows. Left to SQLite, a second
// writer sleeps in its busy handler (1, 2, 5, ... up to 100 ms at a time)
// while it holds a pooled connection, and wakes late when the lock was free
// long before: at 16 concurrent deploys, status writes waited over a second.
// Here writers queue on the gate, in Go, and each starts as soon as the one
// before it ends.
//
// With synchronous FULL, SQLite fsyncs the WAL inside every commit, under
// its write lock, so every write waits for every fsync before it. Here the
// connections run with synchronous NORMAL, whose commit writes the WAL but
// does not fsync it, and a write returns only once an fsync of the WAL that
// began after its commit has ended: writes that end while an fsync runs
// share the next one (group commit). A write returns when it is durable, as
// with FULL. A read returns once every write that began before it ended is
// durable, so that what a read is shown is never lost in a power cut either.
//
// The WAL is enough: SQLite fsyncs the WAL before it checkpoints it into
// the database file and the database file after, and removes the WAL only
// after a checkpoint of all of it.
type commits struct {
	wal string       // the WAL file's path
	dir string       // the directory that holds it
	log *slog.Logger // warns of fsyncs slower than slowSync

	gate sync.Mutex // held by the one write that runs

	begun   atomic.Uint64 // writes begun, numbered from 1
	durable atomic.Uint64 // writes 1..durable are durable

	mu      sync.Mutex
	ended   uint64 // writes 1..ended have ended
	syncing bool   // syncRounds runs
	running *round // the fsync that runs, if any
	next    *round // the fsync that callers wait for to start, if any
	err     error  // the first failed fsync
	walIno  uint64 // the WAL whose directory entry is durable; by syncRounds
}

// round is one fsync of the WAL: it makes writes 1..upTo durable.
type round struct {
	upTo uint64        // set when it starts
	done chan struct{} // closed when it ended
}

func newCommits(dbPath string, log *slog.Logger) *commits {
	return &commits{wal: dbPath + "-wal", dir: filepath.Dir(dbPath), log: log}
}

// slowSync is how long an fsync of the WAL may take before syncRounds
// warns: the reads and writes in flight wait for it, so a disk that slow
// stalls the API, and the log should say why.
const slowSync = time.Second

// commitsPlugin is the name commits registers under with gorm.
const commitsPlugin = "sless:sqlite-commits"

// Name implements gorm.Plugin.
func (c *commits) Name() string { return commitsPlugin }

// Initialize implements gorm.Plugin: it wraps gorm's statements. Writes
// (create, update, delete, raw Exec) take the gate and return once durable;
// reads (queries, rows) return once what they may have seen is durable.
// A statement inside a transaction is left alone: the transaction is one
// write, run through Write.
func (c *commits) Initialize(db *gorm.DB) error {
	cb := db.Callback()
	for _, w := range []struct {
		p interface {
			Get(string) func(*gorm.DB)
			Replace(string, func(*gorm.DB)) error
		}
		name string
		wrap func(func(*gorm.DB)) func(*gorm.DB)
	}{
		{cb.Create(), "gorm:create", c.wrapWrite},
		{cb.Update(), "gorm:update", c.wrapWrite},
		{cb.Delete(), "gorm:delete", c.wrapWrite},
		{cb.Raw(), "gorm:raw", c.wrapWrite},
		{cb.Query(), "gorm:query", c.wrapRead},
		{cb.Row(), "gorm:row", c.wrapRead},
	} {
		next := w.p.Get(w.name)
		if next == nil {
			return fmt.Errorf("gorm has no %s callback to wrap", w.name)
		}
		if err := w.p.Replace(w.name, w.wrap(next)); err != nil {
			return err
		}
	}
	return nil
}

func inTransaction(db *gorm.DB) bool {
	_, ok := db.Statement.ConnPool.(gorm.TxCommitter)
	return ok
}

func (c *commits) wrapWrite(next func(*gorm.DB)) func(*gorm.DB) {
	return func(db *gorm.DB) {
		if inTransaction(db) {
			next(db)
			return
		}
		if err := c.write(func() error { next(db); return nil }); err != nil {
			db.AddError(err)
		}
	}
}

func (c *commits) wrapRead(next func(*gorm.DB)) func(*gorm.DB) {
	return func(db *gorm.DB) {
		next(db)
		if db.Error != nil || inTransaction(db) {
			return
		}
		if err := c.waitDurable(c.begun.Load()); err != nil {
			db.AddError(err)
		}
	}
}

// write runs fn as the one write of the database and returns once what it
// committed is durable. fn's error is returned as it is; an fsync failure
// is returned when fn succeeded.
func (c *commits) write(fn func() error) error {
	c.gate.Lock()
	seq := c.begun.Add(1)
	err := func() error {
		defer c.end(seq)
		return fn()
	}()
	if syncErr := c.waitDurable(seq); err == nil {
		err = syncErr
	}
	return err
}

// end records that write seq has ended and lets the next write start.
func (c *commits) end(seq uint64) {
	c.mu.Lock()
	c.ended = seq
	c.startSyncs()
	c.mu.Unlock()
	c.gate.Unlock()
}

// waitDurable returns once writes 1..seq are durable. It waits for the
// fsync that runs when that fsync began after write seq ended, else for
// the next one, so that writes ending while an fsync runs share the next.
// It fails for good once an fsync failed: the kernel may have dropped the
// pages it could not write.
func (c *commits) waitDurable(seq uint64) error {
	for c.durable.Load() < seq {
		c.mu.Lock()
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return err
		}
		r := c.running
		if r == nil || r.upTo < seq {
			if c.next == nil {
				c.next = &round{done: make(chan struct{})}
			}
			r = c.next
			c.startSyncs()
		}
		c.mu.Unlock()
		<-r.done
	}
	return nil
}

// startSyncs starts syncRounds when a round waits that has writes to make
// durable and none runs. A reader may wait for a write that still runs: its
// end starts the round. Called with mu held.
func (c *commits) startSyncs() {
	if c.next != nil && !c.syncing && c.ended > c.durable.Load() {
		c.syncing = true
		go c.syncRounds()
	}
}

// syncRounds runs the rounds callers wait for, one after another, until
// none waits or nothing is left to make durable.
func (c *commits) syncRounds() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.next != nil && c.ended > c.durable.Load() {
		r := c.next
		c.next, c.running = nil, r
		r.upTo = c.ended
		c.mu.Unlock()
		began := time.Now()
		err := c.syncWAL()
		if took := time.Since(began); took >= slowSync {
			c.log.Warn("the database's disk was slow to keep writes; the reads and writes in flight waited for it",
				"duration", took, "writes", r.upTo-c.durable.Load())
		}
		c.mu.Lock()
		c.running = nil
		if err != nil {
			c.err = fmt.Errorf("the database's disk failed to keep a write (restart the server once the disk is sound): %w", err)
			close(r.done)
			if c.next != nil {
				close(c.next.done)
				c.next = nil
			}
			break
		}
		c.durable.Store(r.upTo)
		close(r.done)
	}
	c.syncing = false
}

// syncWAL fsyncs the WAL file, and the directory that holds it when the
// file is new since the last call. A WAL that is gone needs nothing: SQLite
// removes it only after a checkpoint fsynced all of it into the database.
func (c *commits) syncWAL() error {
	f, err := os.Open(c.wal)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if err := syscall.Fdatasync(int(f.Fd())); err != nil {
		return err
	}
	if st.Ino != c.walIno {
		if err := durable.SyncDir(c.dir); err != nil {
			return err
		}
		c.walIno = st.Ino
	}
	return nil
}

// Write runs fn, which writes through a transaction of its own (gorm's
// Transaction, or database/sql's), and returns once what it committed is
// durable. On SQLite fn runs as the database's one write: it must write
// through its transaction only, since a write outside it would wait for fn
// to end. On PostgreSQL, Write only runs fn.
func Write(db *gorm.DB, fn func() error) error {
	c, ok := db.Config.Plugins[commitsPlugin].(*commits)
	if !ok {
		return fn()
	}
	return c.write(fn)
}
