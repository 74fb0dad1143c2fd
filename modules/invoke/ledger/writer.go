package ledger

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"
)

const (
	// The rows of one INSERT statement on PostgreSQL (a batch may take
	// several, in its one transaction): 1000 rows of 18 columns stay well
	// under its 65535 bind parameters whatever BatchSize is.
	postgresRowsPerInsert = 1000
	// Failed batches are retried after retryMin, doubling up to retryMax:
	// often enough to catch a restarted database soon, rarely enough not to
	// flood the log while it is down.
	retryMin = 100 * time.Millisecond
	retryMax = 10 * time.Second
	// writeNowTimeout bounds the synchronous write of a Record after Stop,
	// which has no context of its own.
	writeNowTimeout = 10 * time.Second
)

// startWriter starts the writer goroutine once.
func (l *Ledger) startWriter() {
	l.writer.Do(func() {
		l.writeCtx, l.abortWrites = context.WithCancelCause(context.Background())
		go l.writeLoop(l.writeCtx)
	})
}

// writeLoop writes batches from the queue until it is closed. Once ctx is
// cancelled (Stop ran out of time) it drops what it takes from the queue,
// which still unblocks the senders waiting on it.
func (l *Ledger) writeLoop(ctx context.Context) {
	defer close(l.writerDone)
	batch := make([]row, 0, l.opts.BatchSize)
	for open := true; open; {
		first, ok := <-l.queue
		if !ok {
			break
		}
		batch, open = l.collect(append(batch, first))
		l.writeBatch(ctx, batch)
		// Clearing drops the references to the written rows' logs.
		clear(batch)
		batch = batch[:0]
	}
	if l.dropped > 0 {
		l.log.Error("dropped invocation records: the ledger stopped before the database accepted them", "records", l.dropped)
	}
}

// collect adds to batch what arrives within FlushInterval, up to BatchSize
// records. It reports false once the queue is closed.
func (l *Ledger) collect(batch []row) ([]row, bool) {
	timer := time.NewTimer(l.opts.FlushInterval)
	defer timer.Stop()
	for len(batch) < l.opts.BatchSize {
		select {
		case r, ok := <-l.queue:
			if !ok {
				return batch, false
			}
			batch = append(batch, r)
		case <-timer.C:
			return batch, true
		}
	}
	return batch, true
}

// writeBatch inserts batch, retrying with backoff until it succeeds or ctx
// is cancelled; then the batch is counted as dropped.
func (l *Ledger) writeBatch(ctx context.Context, batch []row) {
	delay := retryMin
	for attempt := 1; ctx.Err() == nil; attempt++ {
		err := l.insert(ctx, batch)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			break
		}
		l.log.Error("writing invocation records failed; retrying", "records", len(batch), "attempt", attempt, "retry_in", delay, "error", err)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
		delay = min(2*delay, retryMax)
	}
	l.dropped += len(batch)
}

// insert writes rows in one transaction. A row already stored is skipped:
// when a commit succeeds but its answer is lost, the retry must not fail on
// the rows it wrote.
//
// gorm's logger is silenced: it renders every statement's SQL with its
// arguments (a regexp over tens of kilobytes per batch) even when it logs
// nothing, which took 60% of the writer's CPU; the callers log failures.
func (l *Ledger) insert(ctx context.Context, rows []row) error {
	if !isPostgres(l.db) {
		return l.insertPrepared(ctx, rows)
	}
	db := l.db.Session(&gorm.Session{Context: ctx, Logger: l.db.Logger.LogMode(logger.Silent)})
	return db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(rows, postgresRowsPerInsert).Error; err != nil {
			return fmt.Errorf("inserting %d invocation records: %w", len(rows), err)
		}
		return nil
	})
}

// insertSQLite inserts one row; executed once per row of a batch.
const insertSQLite = `INSERT INTO invocations (id, namespace, function, trigger_kind, trigger_name, method, path, started_at,
	duration_ms, queue_ms, cold_start, cold_start_ms, handler_ms, status_code, error, request_bytes, response_bytes, logs)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`

// insertPrepared writes rows in one SQLite transaction with one prepared
// single-row INSERT: SQLite is in-process, so executing a statement per row
// costs no round trip, and the statement is parsed once per batch instead of
// per multi-row INSERT. It measured four times the rate of CreateInBatches.
func (l *Ledger) insertPrepared(ctx context.Context, rows []row) error {
	sqlDB, err := l.db.DB()
	if err != nil {
		return err
	}
	tx, err := sqlDB.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("inserting %d invocation records: %w", len(rows), err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, insertSQLite)
	if err != nil {
		return fmt.Errorf("inserting %d invocation records: %w", len(rows), err)
	}
	defer stmt.Close()
	// Without a Done channel the driver starts no watcher goroutine per
	// statement; a batch is short.
	execCtx := context.WithoutCancel(ctx)
	for i := range rows {
		r := &rows[i]
		if _, err := stmt.ExecContext(execCtx, r.ID, r.Namespace, r.Function, r.TriggerKind, r.TriggerName, r.Method, r.Path,
			r.StartedAt, r.DurationMS, r.QueueMS, r.ColdStart, r.ColdStartMS, r.HandlerMS, r.StatusCode, r.Error,
			r.RequestBytes, r.ResponseBytes, r.Logs); err != nil {
			return fmt.Errorf("inserting %d invocation records: %w", len(rows), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing %d invocation records: %w", len(rows), err)
	}
	return nil
}

// writeNow writes r at once, for a Record after Stop.
func (l *Ledger) writeNow(r row) {
	ctx, cancel := context.WithTimeout(context.Background(), writeNowTimeout)
	defer cancel()
	if err := l.insert(ctx, []row{r}); err != nil {
		l.log.Error("writing an invocation record after the ledger stopped failed; the record is lost", "id", r.ID, "namespace", r.Namespace, "function", r.Function, "error", err)
	}
}
