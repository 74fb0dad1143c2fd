package ledger

import (
	"context"
	"time"
)

// MaintainAt runs the maintenance as if the time were now.
func (l *Ledger) MaintainAt(ctx context.Context, now time.Time) error { return l.maintainAt(ctx, now) }

// SetDeleteBatch makes retention delete at most n rows per statement, so
// that a test exercises several statements.
func (l *Ledger) SetDeleteBatch(n int) { l.deleteBatch = n }
