package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
)

const (
	// maintenanceInterval is how often partitions are prepared and expired
	// records removed. Partitions are prepared days ahead, so that many
	// failed runs in a row still find today's in place.
	maintenanceInterval = time.Hour
	// daysAhead is how many day partitions after today's exist, so that
	// midnight never finds its day missing.
	daysAhead = 2
	// deleteBatchSize bounds the rows one retention DELETE removes, so that
	// it holds SQLite's write lock (or PostgreSQL's row locks) only briefly.
	deleteBatchSize = 5000
	// deletePause separates retention DELETEs. SQLite's busy handler polls,
	// up to every 100ms: without a pause the next DELETE takes the lock
	// again before a waiting writer polls.
	deletePause = 100 * time.Millisecond
	// partitionLockID is the PostgreSQL advisory lock that serializes the
	// partition changes of servers sharing the database.
	partitionLockID = 0x51e55_0002
	// partitionPrefix and partitionDay make the name of a day's partition,
	// such as invocations_p20250131.
	partitionPrefix = table + "_p"
	partitionDay    = "20060102"
)

// maintainOrLog runs Maintain, logging a failure: the next hourly run
// retries it.
func (l *Ledger) maintainOrLog(ctx context.Context) {
	if err := l.Maintain(ctx); err != nil && ctx.Err() == nil {
		l.log.Error("invocation ledger maintenance failed; retrying in an hour", "error", err)
	}
}

// Maintain creates the day partitions of today and the next days on
// PostgreSQL, and removes the records older than the retention. Start runs
// it hourly; it is exported for tools that prepare or clean a database
// without running a ledger.
func (l *Ledger) Maintain(ctx context.Context) error {
	return l.maintainAt(ctx, time.Now())
}

// maintainAt is Maintain at the time now.
func (l *Ledger) maintainAt(ctx context.Context, now time.Time) error {
	var cutoff time.Time
	if l.opts.Retention > 0 {
		cutoff = now.Add(-l.opts.Retention)
	}
	if !isPostgres(l.db) {
		return l.deleteOlder(ctx, table, cutoff)
	}
	// Rows land in the default partition when their day had no partition;
	// they are expired row by row, also when the partitions could not be
	// changed (another server may hold a lock long).
	return errors.Join(l.preparePartitions(ctx, now, cutoff), l.deleteOlder(ctx, defaultPartition, cutoff))
}

// deleteOlder deletes the rows of tbl that started before cutoff, in
// statements of at most deleteBatch rows; a zero cutoff deletes nothing.
func (l *Ledger) deleteOlder(ctx context.Context, tbl string, cutoff time.Time) error {
	if cutoff.IsZero() {
		return nil
	}
	stmt := fmt.Sprintf(`DELETE FROM %[1]s WHERE (id, started_at) IN
		(SELECT id, started_at FROM %[1]s WHERE started_at < ? LIMIT ?)`, tbl)
	for {
		res := l.db.WithContext(ctx).Exec(stmt, cutoff.UTC(), l.deleteBatch)
		if res.Error != nil {
			return fmt.Errorf("deleting invocations started before %s from %s: %w", cutoff.UTC().Format(time.RFC3339), tbl, res.Error)
		}
		if res.RowsAffected < int64(l.deleteBatch) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("deleting invocations from %s: %w", tbl, ctx.Err())
		case <-time.After(deletePause):
		}
	}
}

// preparePartitions creates the missing partitions from today's to
// daysAhead days later and drops the partitions that end before cutoff, in
// one transaction under an advisory lock, so that servers sharing the
// database do not race.
//
// A change locks the table first, so that the statements on it wait before
// they start instead of inside the change. A statement that took its lock
// on the table before the change commits plans with the partitions as they
// were: it would miss the rows createPartition moves out of the default
// partition, and it would wait for the default partition, which attaching
// holds, while holding the table, which dropping needs (a deadlock).
// Locking the table alone (ONLY) is enough: reads and inserts reach the
// partitions through it.
func (l *Ledger) preparePartitions(ctx context.Context, now, cutoff time.Time) error {
	return l.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// Partition DDL locks the whole table; rather than wait behind a long
		// query while every insert queues behind the DDL, give up and retry
		// at the next run.
		if err := tx.Exec("SET LOCAL lock_timeout = '5s'").Error; err != nil {
			return fmt.Errorf("setting the lock timeout for partition changes: %w", err)
		}
		if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", partitionLockID).Error; err != nil {
			return fmt.Errorf("locking the invocation partitions: %w", err)
		}
		days, err := partitionDays(tx)
		if err != nil {
			return err
		}
		var missing, expired []time.Time
		today := now.UTC().Truncate(24 * time.Hour)
		for i := range daysAhead + 1 {
			if day := today.AddDate(0, 0, i); !days[day] {
				missing = append(missing, day)
			}
		}
		for day := range days {
			// A zero cutoff expires nothing.
			if !cutoff.IsZero() && !day.AddDate(0, 0, 1).After(cutoff) {
				expired = append(expired, day)
			}
		}
		if len(missing)+len(expired) == 0 {
			return nil
		}
		if err := tx.Exec("LOCK TABLE ONLY " + table + " IN ACCESS EXCLUSIVE MODE").Error; err != nil {
			return fmt.Errorf("locking the invocations table to change its partitions: %w", err)
		}
		for _, day := range missing {
			if err := createPartition(tx, day); err != nil {
				return err
			}
		}
		for _, day := range expired {
			if err := tx.Exec("DROP TABLE " + partitionName(day)).Error; err != nil {
				return fmt.Errorf("dropping the expired invocation partition %s: %w", partitionName(day), err)
			}
		}
		return nil
	})
}

// partitionDays returns the days whose partitions exist.
func partitionDays(tx *gorm.DB) (map[time.Time]bool, error) {
	var names []string
	err := tx.Raw(`SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = ?::regclass`, table).Scan(&names).Error
	if err != nil {
		return nil, fmt.Errorf("listing the invocation partitions: %w", err)
	}
	days := make(map[time.Time]bool, len(names))
	for _, name := range names {
		// The default partition, and any table someone else attached, do
		// not match the pattern and are left alone.
		suffix, ok := strings.CutPrefix(name, partitionPrefix)
		if !ok {
			continue
		}
		if day, err := time.Parse(partitionDay, suffix); err == nil {
			days[day] = true
		}
	}
	return days, nil
}

// createPartition creates the partition of day. The rows of that day that
// already sit in the default partition are moved into it first: PostgreSQL
// refuses a partition whose rows the default partition holds. The caller
// holds the table's lock (see preparePartitions).
func createPartition(tx *gorm.DB, day time.Time) error {
	name := partitionName(day)
	from, to := day, day.AddDate(0, 0, 1)
	stmts := []string{
		fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`, name, table),
		fmt.Sprintf(`WITH moved AS (DELETE FROM %s WHERE started_at >= '%s' AND started_at < '%s' RETURNING *)
			INSERT INTO %s SELECT * FROM moved`, defaultPartition, bound(from), bound(to), name),
		// Attaching creates the table's indexes on the partition.
		fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`, table, name, bound(from), bound(to)),
	}
	for _, s := range stmts {
		if err := tx.Exec(s).Error; err != nil {
			return fmt.Errorf("creating the invocation partition %s: %w", name, err)
		}
	}
	return nil
}

func partitionName(day time.Time) string { return partitionPrefix + day.Format(partitionDay) }

// bound formats a partition bound: a UTC timestamp literal, made from a
// time.Time and so safe to splice into DDL, which takes no parameters.
func bound(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05+00") }
