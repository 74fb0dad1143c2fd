package ledger

import (
	"context"
	"time"

	"sless.kube5s.ru/sless/modules/invoke"
)

// MaintainAt runs the maintenance as if the time were now.
func (l *Ledger) MaintainAt(ctx context.Context, now time.Time) error { return l.maintainAt(ctx, now) }

// SetDeleteBatch makes retention delete at most n rows per statement, so
// that a test exercises several statements.
func (l *Ledger) SetDeleteBatch(n int) { l.deleteBatch = n }

// InsertRecords writes records to the database as the writer does, without
// the journal.
func (l *Ledger) InsertRecords(ctx context.Context, recs []*invoke.Record) error {
	rows := make([]row, len(recs))
	for i, r := range recs {
		rows[i] = toRow(r)
	}
	return l.insert(ctx, rows, false)
}
