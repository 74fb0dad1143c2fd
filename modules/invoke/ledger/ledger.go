// Package ledger is the gorm implementation of invoke.Ledger, for SQLite and
// PostgreSQL.
//
// Record appends the record to a local journal (package journal) and returns:
// the request path never waits on the database, and a record survives a
// crash of the server from the moment Record returns (a power loss once the
// journal is fsynced). One writer goroutine drains the journal into the
// database in batches, one transaction each, retrying while the database is
// down; what it had not written when the server stopped or crashed it writes
// at the next start. Inserting a record twice stores it once.
//
// Records are kept for a retention period. On PostgreSQL the table is
// partitioned by day of started_at, so that expiring a day drops a partition
// instead of deleting rows; rows outside the partitions created so far land in
// a default partition, so an insert never fails for want of one. On SQLite
// expired rows are deleted in small batches, so that the write lock is never
// held for long.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"sless.kube5s.ru/sless/internal/periodic"
	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/invoke/ledger/journal"
)

// Defaults of Options.
const (
	DefaultBatchSize     = 500
	DefaultFlushInterval = 50 * time.Millisecond
	// DefaultRetention is what configuration should default to; a zero
	// Options.Retention keeps records forever.
	DefaultRetention = 7 * 24 * time.Hour
)

// Options tune a Ledger. Zero BatchSize and FlushInterval mean their
// defaults.
type Options struct {
	// Journal configures the journal; its Dir is required.
	Journal journal.Options
	// BatchSize is the most records written in one transaction.
	BatchSize int
	// FlushInterval is how long the writer lets a batch fill after a record
	// arrives: about the most a record waits to be written when the
	// database keeps up.
	FlushInterval time.Duration
	// Retention is how long records are kept; zero or less keeps them
	// forever. On PostgreSQL whole days are dropped, so a record is kept for
	// up to a day longer.
	Retention time.Duration
	// Log receives write and maintenance failures; nil means slog.Default().
	Log *slog.Logger
	// Metrics, when set, receives the ledger's gauges and counters.
	Metrics prometheus.Registerer
}

func (o Options) withDefaults() Options {
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Journal.Log == nil {
		o.Journal.Log = o.Log
	}
	return o
}

// ErrNotRecording is returned (wrapped) by Accepting while the journal
// cannot be written.
var ErrNotRecording = errors.New("the server cannot record invocations")

// Ledger implements invoke.Ledger. Start and Stop are meant for fx lifecycle
// hooks.
type Ledger struct {
	db   *gorm.DB
	opts Options
	log  *slog.Logger
	j    *journal.Journal
	// running keeps the starts of runs in progress (Begin).
	running *running

	bufs sync.Pool

	mu      sync.Mutex
	started bool
	stopped bool
	// held are records the journal refused (a full disk), kept in memory
	// until the journal or the database takes them; heldErr is why, nil
	// once the journal writes again.
	held    []row
	heldErr error
	// holding is heldErr != nil, set and cleared with it under mu, so that
	// Accepting, on every invocation, takes no lock while all is well.
	holding atomic.Bool
	// lost counts records neither the journal nor memory could keep.
	lost int

	// progressMu guards the writer's progress: written is the journal
	// position before which everything is in the database, progress is
	// closed and replaced when it moves; failingSince is when the writer's
	// current batch first failed, zero while writes succeed.
	progressMu   sync.Mutex
	written      journal.Pos
	progress     chan struct{}
	failingSince time.Time
	lastErr      error
	lastLog      time.Time

	writer sync.Once
	// stopping asks the writer to write what the journal holds and end;
	// writeCtx is the writer's context, cancelled when Stop runs out of
	// time.
	stopping    chan struct{}
	writeCtx    context.Context
	abortWrites context.CancelCauseFunc
	writerDone  chan struct{}

	metrics *metrics

	// maintenance runs Maintain hourly between Start and Stop.
	maintenance *periodic.Loop
	// deleteBatch is how many rows one retention DELETE removes.
	deleteBatch int
}

var _ invoke.Ledger = (*Ledger)(nil)

// New opens the journal and returns a ledger on db; the migrations must have
// run. Records can be recorded at once; Start starts writing them, beginning
// with those an earlier process left in the journal.
func New(db *gorm.DB, opts Options) (*Ledger, error) {
	opts = opts.withDefaults()
	j, err := journal.Open(opts.Journal)
	if err != nil {
		return nil, err
	}
	l := &Ledger{
		db: db, opts: opts, log: opts.Log, j: j,
		written:     j.Start(),
		progress:    make(chan struct{}),
		stopping:    make(chan struct{}),
		writerDone:  make(chan struct{}),
		deleteBatch: deleteBatchSize,
	}
	if behind := j.Behind(j.Start()); behind > 0 {
		l.log.Info("the invocation journal holds records not yet written to the database; writing them", "bytes", behind)
	}
	l.metrics = newMetrics(l, opts.Metrics)
	if l.running, err = openRunning(opts.Journal, l.log, l.add); err != nil {
		j.Close()
		return nil, err
	}
	return l, nil
}

// Start starts the writer and the maintenance loop (partitions and
// retention: once now, then hourly) and returns at once. Both run until
// Stop, not until ctx ends: fx cancels its start context after startup.
func (l *Ledger) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.stopped:
		return errors.New("starting the invocation ledger: it is stopped")
	case l.started:
		return errors.New("starting the invocation ledger: it is started already")
	}
	l.started = true
	l.startWriter()
	l.maintenance = periodic.Start(ctx, maintenanceInterval, l.maintainOrLog)
	return nil
}

// stopMargin is the part of Stop's time kept for syncing the journal and
// saying what is left in it, after the writer gave up on the database.
const stopMargin = time.Second

// Stop writes what the journal holds to the database and returns, also when
// Start was never called. When the database does not take the records in
// the time ctx allows, they stay in the journal for the next start, Stop
// logs how much, and returns nil: nothing is lost. Records after Stop go to
// the journal only.
func (l *Ledger) Stop(ctx context.Context) error {
	l.mu.Lock()
	first := !l.stopped
	l.stopped = true
	maintenance := l.maintenance
	l.mu.Unlock()
	if !first {
		<-l.writerDone
		return nil
	}
	l.startWriter()
	close(l.stopping)
	if maintenance != nil {
		// Maintenance ends within a database round trip: its statements
		// run with the context Stop cancels.
		maintenance.Stop()
	}
	giveUp := make(<-chan time.Time)
	if deadline, ok := ctx.Deadline(); ok {
		t := time.NewTimer(max(time.Until(deadline)-stopMargin, time.Until(deadline)/2))
		defer t.Stop()
		giveUp = t.C
	}
	select {
	case <-l.writerDone:
	case <-giveUp:
		l.abortWrites(errors.New("the server is stopping"))
		<-l.writerDone
	case <-ctx.Done():
		l.abortWrites(ctx.Err())
		<-l.writerDone
	}
	l.running.stop()
	if err := l.j.Sync(); err != nil {
		l.log.Error("syncing the invocation journal at stop failed; its records are in the kernel's cache and are lost only if the machine goes down before it writes them", "error", err)
	}
	l.progressMu.Lock()
	written, lastErr := l.written, l.lastErr
	l.progressMu.Unlock()
	if left := l.j.Behind(written); left > 0 {
		l.log.Warn("stopped with invocation records not yet in the database; they are kept in the journal and written at the next start",
			"bytes", left, "journal", l.opts.Journal.Dir, "error", lastErr)
	}
	held, lost := l.heldAndLost()
	if held+lost > 0 {
		return fmt.Errorf("stopping the invocation ledger: %d invocation records could be kept neither in the journal nor in the database: %w", held+lost, ErrNotRecording)
	}
	return nil
}

// Record implements invoke.Ledger: it appends r (cleaned, see toRow) to the
// journal and returns, without waiting for the database. When the journal
// cannot be written the record is held in memory (up to maxHeld records)
// and Accepting fails until the journal or the database took it.
func (l *Ledger) Record(r *invoke.Record) { l.add(toRow(r)) }

// add appends rw to the journal, or holds it when the journal refuses it.
func (l *Ledger) add(rw row) {
	bp, _ := l.bufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	*bp = appendRow((*bp)[:0], &rw)
	err := l.j.Append(*bp)
	if cap(*bp) <= 64<<10 {
		l.bufs.Put(bp)
	}
	if err != nil {
		l.hold(rw, err)
	}
}

// Begin implements invoke.Ledger: it appends r's start to a journal of runs
// in progress, which the next start of the server reads; see running. end
// fsyncs the invocation journal (a no-op when every append is fsynced)
// before it ends the run.
func (l *Ledger) Begin(r *invoke.Record) (func(), error) {
	rw := toRow(r)
	end, err := l.running.begin(&rw)
	if err != nil {
		return nil, err
	}
	return func() {
		if err := l.j.Sync(); err != nil {
			l.log.Error("syncing the invocation journal at the end of a run failed", "invocation_id", rw.ID, "error", err)
		}
		end()
	}, nil
}

// Accepting implements invoke.Ledger: it fails while the journal cannot be
// written (a full disk), with a message for the client.
func (l *Ledger) Accepting() error {
	if !l.holding.Load() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.heldErr != nil {
		return fmt.Errorf("%w: its invocation journal cannot be written (%s)", ErrNotRecording, journalProblem(l.heldErr))
	}
	return nil
}

// List implements invoke.Ledger. An invalid q is a *validation.Errors whose
// fields are named as the REST API's query parameters. The records recorded
// before List was called are in it unless the writer is more than readWait
// behind.
func (l *Ledger) List(ctx context.Context, namespace string, q invoke.Query) ([]*invoke.Record, string, error) {
	if err := validateQuery(q); err != nil {
		return nil, "", err
	}
	// As Get, a list shows what was recorded before it was asked for: it
	// waits for the writer to get there, and when the writer is further
	// behind than readWait (a database that was down) lists what is written.
	if err := l.caughtUp(ctx, l.j.End()); err != nil && ctx.Err() != nil {
		return nil, "", fmt.Errorf("listing invocations in namespace %s: %w", namespace, ctx.Err())
	}
	limit := validation.PageSize(q.Limit)
	var rows []row
	// Omit keeps the logs, the bulk of a row, out of the query altogether.
	tx := l.db.WithContext(ctx).Omit("logs").Where("namespace = ?", namespace)
	if err := filter(tx, q).Order("id DESC").Limit(limit + 1).Find(&rows).Error; err != nil {
		return nil, "", fmt.Errorf("listing invocations in namespace %s: %w", namespace, err)
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		next = rows[limit-1].ID
	}
	out := make([]*invoke.Record, len(rows))
	for i := range rows {
		out[i] = fromRow(&rows[i])
	}
	return out, next, nil
}

// readWait bounds how long a read waits for the writer to reach the
// records recorded before it.
const readWait = 10 * time.Second

// Get implements invoke.Ledger. A record recorded before Get was called is
// found even when the writer has not written it yet: Get then waits for the
// writer (up to readWait), and fails when it does not get there.
func (l *Ledger) Get(ctx context.Context, namespace, id string) (*invoke.Record, error) {
	end := l.j.End()
	r, err := l.get(ctx, namespace, id)
	if !errors.Is(err, invoke.ErrNotFound) {
		return r, err
	}
	if err := l.caughtUp(ctx, end); err != nil {
		return nil, fmt.Errorf("reading invocation %s in namespace %s: the invocation ledger is behind and may not have written it yet: %w", id, namespace, err)
	}
	return l.get(ctx, namespace, id)
}

// caughtUp waits until the writer has written the journal up to end, or has
// stopped (it will not get further); it fails when ctx ends or readWait
// passes first.
func (l *Ledger) caughtUp(ctx context.Context, end journal.Pos) error {
	ctx, cancel := context.WithTimeout(ctx, readWait)
	defer cancel()
	for {
		l.progressMu.Lock()
		written, progress := l.written, l.progress
		l.progressMu.Unlock()
		if !written.Less(end) {
			return nil
		}
		select {
		case <-progress:
		case <-l.writerDone:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (l *Ledger) get(ctx context.Context, namespace, id string) (*invoke.Record, error) {
	var r row
	err := l.db.WithContext(ctx).Where("namespace = ? AND id = ?", namespace, id).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, fmt.Errorf("invocation %s in namespace %s: %w", id, namespace, invoke.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading invocation %s in namespace %s: %w", id, namespace, err)
	}
	return fromRow(&r), nil
}

// behind is how many bytes of records wait in the journal for the database.
func (l *Ledger) behind() int64 {
	l.progressMu.Lock()
	written := l.written
	l.progressMu.Unlock()
	return l.j.Behind(written)
}

// failingFor is how long the writer's current batch has failed; 0 while
// writes succeed.
func (l *Ledger) failingFor() time.Duration {
	l.progressMu.Lock()
	defer l.progressMu.Unlock()
	if l.failingSince.IsZero() {
		return 0
	}
	return time.Since(l.failingSince)
}

// unhealthyAfter is how long the database may refuse records before
// readiness says so: a restarting database is not worth a failed check.
const unhealthyAfter = 5 * time.Second

// Check is the ledger's readiness check: it fails while the journal cannot
// be written (/fn refuses invocations), or while the database has refused
// records for longer than unhealthyAfter (/fn still answers; the records
// wait in the journal).
func (l *Ledger) Check(context.Context) error {
	if err := l.Accepting(); err != nil {
		return fmt.Errorf("%w; /fn refuses invocations until it can", err)
	}
	if d := l.failingFor(); d > unhealthyAfter {
		return fmt.Errorf("the database has refused invocation records for %s; %d bytes of them wait in the journal", d.Round(time.Second), l.behind())
	}
	return nil
}

// heldAndLost returns how many records wait in memory and how many were
// lost.
func (l *Ledger) heldAndLost() (held, lost int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held), l.lost
}
