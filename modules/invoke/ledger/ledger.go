// Package ledger is the gorm implementation of invoke.Ledger, for SQLite and
// PostgreSQL.
//
// Record only queues: one writer goroutine inserts what is queued in batches,
// one multi-row INSERT per transaction, retrying while the database is down.
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
	"time"

	"gorm.io/gorm"

	"sless.kube5s.ru/sless/internal/periodic"
	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/invoke"
)

// Defaults of Options.
const (
	DefaultBatchSize     = 500
	DefaultFlushInterval = 50 * time.Millisecond
	DefaultQueueSize     = 10000
	// DefaultRetention is what configuration should default to; a zero
	// Options.Retention keeps records forever.
	DefaultRetention = 7 * 24 * time.Hour
)

// Options tune a Ledger. Zero BatchSize, FlushInterval and QueueSize mean
// their defaults.
type Options struct {
	// BatchSize is the most records written in one transaction.
	BatchSize int
	// FlushInterval is how long the writer waits for a batch to fill after
	// its first record arrives: the most a record waits to be written when
	// the database keeps up.
	FlushInterval time.Duration
	// QueueSize is how many records wait for the writer before Record blocks.
	QueueSize int
	// Retention is how long records are kept; zero or less keeps them
	// forever. On PostgreSQL whole days are dropped, so a record is kept for
	// up to a day longer.
	Retention time.Duration
	// Log receives write and maintenance failures; nil means slog.Default().
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o
}

// Ledger implements invoke.Ledger. Start and Stop are meant for fx lifecycle
// hooks.
type Ledger struct {
	db   *gorm.DB
	opts Options
	log  *slog.Logger

	queue chan row

	// mu orders Record's look at stopped, and its registration in senders,
	// before Stop's setting of stopped: once stopped is set no sender is
	// added, and the queue is closed when the registered ones have sent.
	mu      sync.RWMutex
	started bool
	stopped bool
	senders sync.WaitGroup

	writer sync.Once
	// writeCtx is the writer's context; Stop cancels it, with its own
	// context's error as the cause, when it runs out of time.
	writeCtx    context.Context
	abortWrites context.CancelCauseFunc
	writerDone  chan struct{}
	// dropped counts records the writer gave up on; it is written by the
	// writer and read after writerDone is closed.
	dropped int

	// maintenance runs Maintain hourly between Start and Stop.
	maintenance *periodic.Loop
	// deleteBatch is how many rows one retention DELETE removes.
	deleteBatch int
}

var _ invoke.Ledger = (*Ledger)(nil)

// New returns a ledger on db; the migrations must have run. Records can be
// queued at once; Start starts writing them.
func New(db *gorm.DB, opts Options) *Ledger {
	opts = opts.withDefaults()
	return &Ledger{
		db: db, opts: opts, log: opts.Log,
		queue:       make(chan row, opts.QueueSize),
		writerDone:  make(chan struct{}),
		deleteBatch: deleteBatchSize,
	}
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

// Stop stops accepting records, writes every record queued before and
// returns when they are written, also when Start was never called. It waits
// for a database that is down for as long as ctx allows; the records still
// unwritten then are dropped and Stop says how many. Later Records are
// written synchronously.
func (l *Ledger) Stop(ctx context.Context) error {
	l.mu.Lock()
	first := !l.stopped
	l.stopped = true
	maintenance := l.maintenance
	l.mu.Unlock()
	if first {
		l.startWriter()
		go func() {
			l.senders.Wait()
			close(l.queue)
		}()
		if maintenance != nil {
			// Maintenance ends within a database round trip: its
			// statements run with the context Stop cancels.
			maintenance.Stop()
		}
	}
	select {
	case <-l.writerDone:
	case <-ctx.Done():
		l.abortWrites(ctx.Err())
		<-l.writerDone
	}
	if l.dropped > 0 {
		return fmt.Errorf("stopping the invocation ledger: %d queued records were not written: %w", l.dropped, context.Cause(l.writeCtx))
	}
	return nil
}

// Record implements invoke.Ledger. It copies r (see toRow for how values
// are cleaned), so the caller may reuse it. After Stop it writes
// synchronously, logging a failure: the queue is gone, and dropping records
// silently would hide them.
func (l *Ledger) Record(r *invoke.Record) {
	rw := toRow(r)
	l.mu.RLock()
	stopped := l.stopped
	if !stopped {
		l.senders.Add(1)
	}
	l.mu.RUnlock()
	if stopped {
		l.writeNow(rw)
		return
	}
	defer l.senders.Done()
	l.queue <- rw
}

// List implements invoke.Ledger. An invalid q is a *validation.Errors whose
// fields are named as the REST API's query parameters.
func (l *Ledger) List(ctx context.Context, namespace string, q invoke.Query) ([]*invoke.Record, string, error) {
	if err := validateQuery(q); err != nil {
		return nil, "", err
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

// Get implements invoke.Ledger.
func (l *Ledger) Get(ctx context.Context, namespace, id string) (*invoke.Record, error) {
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
