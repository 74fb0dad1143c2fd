package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"sless.kube5s.ru/sless/modules/invoke/ledger/journal"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

const (
	// The rows of one INSERT statement on PostgreSQL (a batch may take
	// several, in its one transaction): 1000 rows of 19 columns stay well
	// under its 65535 bind parameters whatever BatchSize is.
	postgresRowsPerInsert = 1000
	// Failed batches are retried after retryMin, doubling up to retryMax:
	// often enough to catch a restarted database soon, rarely enough not to
	// load one that is struggling.
	retryMin = 100 * time.Millisecond
	retryMax = 2 * time.Second
	// logEvery is how often a writer that keeps failing says so, with how
	// far behind it is.
	logEvery = 10 * time.Second
	// maxHeld bounds the records kept in memory while the journal cannot
	// be written. New invocations are refused then, so only those in
	// flight when the journal failed arrive here.
	maxHeld = 10000
	// probeInterval is how often the writer tries the journal again while
	// it cannot be written.
	probeInterval = time.Second
	// yieldPause is how long the SQLite writer pauses between the
	// statements of a batch once it has caught up (see insertPrepared).
	yieldPause = 20 * time.Microsecond
)

// startWriter starts the writer goroutine once.
func (l *Ledger) startWriter() {
	l.writer.Do(func() {
		l.writeCtx, l.abortWrites = context.WithCancelCause(context.Background())
		go l.writeLoop(l.writeCtx)
		go l.probeLoop(l.writeCtx)
	})
}

// probeLoop retries the records the journal refused, apart from the writer:
// the writer may be stuck on a database that is down.
func (l *Ledger) probeLoop(ctx context.Context) {
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.retryHeld(ctx)
		case <-l.writerDone:
			l.retryHeld(ctx)
			return
		}
	}
}

// writeLoop writes the journal's records to the database in batches, from
// where the last process left off, until Stop: then it writes what the
// journal holds and ends, or ends when ctx is cancelled (Stop ran out of
// time), leaving the rest in the journal.
func (l *Ledger) writeLoop(ctx context.Context) {
	defer close(l.writerDone)
	batch := make([]row, 0, l.opts.BatchSize)
	pos := l.j.Start()
	stopping := false
	for ctx.Err() == nil {
		next, err := l.j.Read(pos, l.opts.BatchSize, func(payload []byte) {
			if len(payload) == 0 {
				return // a probe of a journal that could not be written
			}
			r, err := decodeRow(payload)
			if err != nil {
				l.log.Error("skipping an invocation record of the journal that cannot be decoded", "error", err)
				return
			}
			batch = append(batch, r)
		})
		if err != nil {
			l.writeFailed(err, len(batch))
			clear(batch)
			batch = batch[:0]
			l.pause(ctx, retryMax)
			continue
		}
		// A batch short of BatchSize, or one that ends at the journal's
		// end, took all the journal held: the writer has caught up with the
		// invocations.
		full := len(batch) == l.opts.BatchSize
		if len(batch) > 0 && !l.writeBatch(ctx, batch, !full || next == l.j.End()) {
			return
		}
		// Clearing drops the references to the written rows' logs.
		clear(batch)
		batch = batch[:0]
		if next != pos {
			pos = next
			l.advance(pos)
		}
		if full {
			continue
		}
		if stopping {
			if !pos.Less(l.j.End()) {
				return
			}
			continue
		}
		select {
		case <-l.j.Notify():
			// Let a batch fill before writing it.
			l.pause(ctx, l.opts.FlushInterval)
		case <-l.stopping:
			stopping = true
		case <-ctx.Done():
		}
	}
}

// pause waits for d or until ctx ends.
func (l *Ledger) pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// advance records that everything before pos is in the database: the
// journal may drop it.
func (l *Ledger) advance(pos journal.Pos) {
	if err := l.j.Commit(pos); err != nil {
		l.log.Error("releasing written invocation records from the journal failed; retrying after the next batch", "error", err)
	}
	l.progressMu.Lock()
	l.written = pos
	close(l.progress)
	l.progress = make(chan struct{})
	l.progressMu.Unlock()
}

// writeBatch inserts batch, retrying with backoff until it succeeds or ctx
// is cancelled, when it reports false. caughtUp says that the batch took
// all the journal held (see insert).
func (l *Ledger) writeBatch(ctx context.Context, batch []row, caughtUp bool) bool {
	delay := retryMin
	for {
		start := time.Now()
		err := l.insert(ctx, batch, caughtUp)
		if err == nil {
			l.metrics.wrote(len(batch), time.Since(start))
			l.writeSucceeded()
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		l.writeFailed(err, len(batch))
		l.pause(ctx, delay)
		delay = min(2*delay, retryMax)
	}
}

func (l *Ledger) writeSucceeded() {
	l.progressMu.Lock()
	since := l.failingSince
	l.failingSince, l.lastErr = time.Time{}, nil
	l.progressMu.Unlock()
	if !since.IsZero() {
		l.log.Info("writing invocation records works again", "failed_for", time.Since(since).Round(time.Millisecond))
	}
}

// writeFailed notes a failed write, and logs it the first time and every
// logEvery after, with how far behind the ledger is.
func (l *Ledger) writeFailed(err error, records int) {
	now := time.Now()
	l.progressMu.Lock()
	first := l.failingSince.IsZero()
	if first {
		l.failingSince = now
	}
	since, written := l.failingSince, l.written
	logNow := first || l.lastErr == nil || now.Sub(l.lastLog) >= logEvery
	l.lastErr = err
	if logNow {
		l.lastLog = now
	}
	l.progressMu.Unlock()
	if logNow {
		l.log.Error("writing invocation records to the database failed; they wait in the journal, retrying",
			"records", records, "behind_bytes", l.j.Behind(written), "failing_for", now.Sub(since).Round(time.Millisecond), "error", err)
	}
}

// hold keeps r in memory after the journal refused it with err.
func (l *Ledger) hold(r row, err error) {
	l.mu.Lock()
	first := l.heldErr == nil
	l.heldErr = err
	l.holding.Store(true)
	kept := len(l.held) < maxHeld
	if kept {
		l.held = append(l.held, r)
	} else {
		l.lost++
	}
	l.mu.Unlock()
	if first {
		l.log.Error("the invocation journal cannot be written; /fn refuses new invocations until it can, and keeps those in flight in memory", "error", err)
	}
	if !kept {
		l.log.Error("an invocation record is lost: the journal cannot be written and memory holds its limit", "invocation_id", r.ID,
			"namespace", r.Namespace, "function", r.Function, "status_code", r.StatusCode, "limit", maxHeld)
	}
	l.metrics.refusedByJournal()
}

// retryHeld tries to put the held records into the journal, else straight
// into the database; with none held, it probes the journal with an empty
// frame. Accepting succeeds again once the journal takes a write.
func (l *Ledger) retryHeld(ctx context.Context) {
	l.mu.Lock()
	held, failing := l.held, l.heldErr != nil
	l.held = nil
	l.mu.Unlock()
	if !failing {
		return
	}
	var buf []byte
	var left []row
	journalOK := true
	for i := range held {
		buf = appendRow(buf[:0], &held[i])
		if err := l.j.Append(buf); err != nil {
			journalOK = false
			left = append(left, held[i])
		}
	}
	if len(held) == 0 {
		journalOK = l.j.Append(nil) == nil
	}
	if len(left) > 0 && l.insert(ctx, left, false) == nil {
		left = nil
	}
	l.mu.Lock()
	l.held = append(left, l.held...)
	if journalOK && len(l.held) == 0 {
		l.heldErr = nil
		l.holding.Store(false)
	}
	recovered := l.heldErr == nil
	l.mu.Unlock()
	if recovered {
		l.log.Info("the invocation journal can be written again; /fn accepts invocations")
	}
}

// insert writes rows in one transaction. A row already stored is skipped:
// when a commit succeeds but its answer is lost, the retry must not fail on
// the rows it wrote.
//
// gorm's logger is silenced: it renders every statement's SQL with its
// arguments (a regexp over tens of kilobytes per batch) even when it logs
// nothing, which took 60% of the writer's CPU; the callers log failures.
//
// caughtUp says that the rows are all the journal held: the writer keeps up
// with the invocations, and on SQLite it lets them run between its
// statements (see insertPrepared).
func (l *Ledger) insert(ctx context.Context, rows []row, caughtUp bool) error {
	if !isPostgres(l.db) {
		return l.insertPrepared(ctx, rows, caughtUp)
	}
	db := l.db.Session(&gorm.Session{Context: ctx, Logger: l.db.Logger.LogMode(logger.Silent)})
	return db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(rows, postgresRowsPerInsert).Error; err != nil {
			return fmt.Errorf("inserting %d invocation records: %w", len(rows), err)
		}
		return nil
	})
}

// sqliteColumns are the columns of an invocation row, in the order
// insertPrepared binds them.
const sqliteColumns = `id, namespace, function, trigger_kind, trigger_name, method, path, started_at,
	duration_ms, queue_ms, cold_start, cold_start_ms, handler_ms, status_code, error, request_bytes, response_bytes, logs, trace_id`

// sqliteRowsPerInsert is how many rows one execution of the multi-row
// INSERT writes: 50 rows of 19 columns stay well under SQLite's 32766 bind
// parameters.
const sqliteRowsPerInsert = 50

// sqliteInsert returns the INSERT of n rows.
func sqliteInsert(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO invocations (" + sqliteColumns + ") VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
	}
	b.WriteString(" ON CONFLICT DO NOTHING")
	return b.String()
}

var (
	insertSQLiteOne  = sqliteInsert(1)
	insertSQLiteMany = sqliteInsert(sqliteRowsPerInsert)
)

// insertPrepared writes rows in one SQLite transaction with prepared
// INSERTs: sqliteRowsPerInsert rows per execution while that many are left,
// then one per execution. SQLite is in-process, so an execution costs no
// round trip, but each one costs database/sql and the driver their
// per-statement work (locks, argument conversion, a reset), which a
// multi-row execution pays once for its rows; each statement is parsed once
// per batch. Single-row executions measured four times the rate of gorm's
// CreateInBatches, multi-row ones more again (see the commit).
//
// When the writer has caught up, it sleeps for yieldPause after each
// multi-row execution, so that the /fn requests arriving meanwhile do not
// wait for the whole batch. With one P (the embedded server's GOMAXPROCS at
// light load, see app.serverCPUs), a batch of 400 rows held it for 3-4 ms:
// at one connection p95 was 2.0 ms and p99 4.3 ms, with the pauses 0.7 ms
// and 2.9 ms, for the same CPU per request (see the commit).
// runtime.Gosched would not do: the scheduler polls the network only when
// no goroutine is runnable, and the writer still is. A backlog is written
// without pauses: on an idle P a sleep under a millisecond lasts a whole
// one (the network poller waits in milliseconds), twice as long as the
// execution before it.
func (l *Ledger) insertPrepared(ctx context.Context, rows []row, caughtUp bool) error {
	sqlDB, err := l.db.DB()
	if err != nil {
		return err
	}
	return sqldb.Write(l.db, func() error { return insertPreparedTx(ctx, sqlDB, rows, caughtUp) })
}

// insertPreparedTx is insertPrepared's transaction.
func insertPreparedTx(ctx context.Context, sqlDB *sql.DB, rows []row, caughtUp bool) error {
	total := len(rows) // for messages: rows is consumed below
	tx, err := sqlDB.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("inserting %d invocation records: %w", total, err)
	}
	defer tx.Rollback()
	// Without a Done channel the driver starts no watcher goroutine per
	// statement; a batch is short.
	execCtx := context.WithoutCancel(ctx)
	args := make([]any, 0, 19*sqliteRowsPerInsert)
	for len(rows) > 0 {
		n, query := sqliteRowsPerInsert, insertSQLiteMany
		if len(rows) < n {
			n, query = 1, insertSQLiteOne
		}
		stmt, err := tx.PrepareContext(ctx, query)
		if err != nil {
			return fmt.Errorf("inserting %d invocation records: %w", total, err)
		}
		for ; len(rows) >= n; rows = rows[n:] {
			args = args[:0]
			for i := range rows[:n] {
				r := &rows[i]
				args = append(args, r.ID, r.Namespace, r.Function, r.TriggerKind, r.TriggerName, r.Method, r.Path,
					r.StartedAt, r.DurationMS, r.QueueMS, r.ColdStart, r.ColdStartMS, r.HandlerMS, r.StatusCode, r.Error,
					r.RequestBytes, r.ResponseBytes, r.Logs, r.TraceID)
			}
			if _, err := stmt.ExecContext(execCtx, args...); err != nil {
				stmt.Close()
				return fmt.Errorf("inserting %d invocation records: %w", total, err)
			}
			if caughtUp && n > 1 {
				time.Sleep(yieldPause)
			}
		}
		stmt.Close()
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing %d invocation records: %w", total, err)
	}
	return nil
}
