package sqldb

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"
)

// MigrationsGroup is the fx value-group tag that modules add their
// migrations to (as []Migration values, flattened).
const MigrationsGroup = `group:"sqldb.migrations,flatten"`

// Migration is one versioned schema change owned by a module. Up runs in a
// transaction on both SQLite and PostgreSQL; write it with gorm's Migrator
// and frozen model structs, or with SQL both dialects accept.
//
// Modules own their tables and number their migrations 1, 2, 3...; a
// migration, once released, never changes.
type Migration struct {
	Module  string
	Version int
	Name    string
	Up      func(tx *gorm.DB) error
}

// migrationLockID is the PostgreSQL advisory lock that serializes migrations.
const migrationLockID = 0x51e55_0001

// schemaMigration records an applied migration.
type schemaMigration struct {
	Module    string `gorm:"primaryKey;size:64"`
	Version   int    `gorm:"primaryKey;autoIncrement:false"`
	Name      string `gorm:"size:200;not null"`
	AppliedAt time.Time
}

func (schemaMigration) TableName() string { return "schema_migrations" }

// Migrate applies the migrations that have not been applied yet, each module's
// in version order, each in its own transaction. It fails before touching
// the database when a module's versions are not 1..n without gaps or
// duplicates.
func Migrate(ctx context.Context, db *gorm.DB, migrations []Migration) error {
	ms := slices.Clone(migrations)
	slices.SortFunc(ms, func(a, b Migration) int {
		return cmp.Or(cmp.Compare(a.Module, b.Module), cmp.Compare(a.Version, b.Version))
	})
	if err := checkSequence(ms); err != nil {
		return err
	}
	db = db.WithContext(ctx)
	if err := db.AutoMigrate(&schemaMigration{}); err != nil {
		return fmt.Errorf("creating the schema_migrations table: %w", err)
	}
	var applied []schemaMigration
	if err := db.Find(&applied).Error; err != nil {
		return fmt.Errorf("reading applied migrations: %w", err)
	}
	done := make(map[[2]any]bool, len(applied))
	for _, a := range applied {
		done[[2]any{a.Module, a.Version}] = true
	}
	for _, m := range ms {
		if done[[2]any{m.Module, m.Version}] {
			continue
		}
		err := Write(db, func() error {
			return db.Transaction(func(tx *gorm.DB) error {
				// Servers starting together against one PostgreSQL take turns; the
				// check inside the lock skips what another server just applied.
				if tx.Dialector.Name() == "postgres" {
					if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", migrationLockID).Error; err != nil {
						return err
					}
				}
				var n int64
				if err := tx.Model(&schemaMigration{}).Where("module = ? AND version = ?", m.Module, m.Version).Count(&n).Error; err != nil || n > 0 {
					return err
				}
				if err := m.Up(tx); err != nil {
					return err
				}
				return tx.Create(&schemaMigration{Module: m.Module, Version: m.Version, Name: m.Name, AppliedAt: time.Now().UTC()}).Error
			})
		})
		if err != nil {
			return fmt.Errorf("migration %s/%d (%s): %w", m.Module, m.Version, m.Name, err)
		}
	}
	return nil
}

func checkSequence(sorted []Migration) error {
	next := map[string]int{}
	for _, m := range sorted {
		want := next[m.Module] + 1
		if m.Version != want {
			return fmt.Errorf("migrations of module %q: got version %d, want %d (versions must be 1, 2, 3... without gaps or duplicates)", m.Module, m.Version, want)
		}
		if m.Up == nil {
			return fmt.Errorf("migration %s/%d has no Up function", m.Module, m.Version)
		}
		next[m.Module] = want
	}
	return nil
}
