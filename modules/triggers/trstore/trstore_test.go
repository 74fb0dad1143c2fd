package trstore_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"gorm.io/gorm"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/trstore"
	"sless.kube5s.ru/sless/modules/triggers/trstoretest"
)

// The conformance suite runs on both databases.
var databases = map[string]func(t *testing.T) string{
	"SQLite":     func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "db.sqlite") },
	"PostgreSQL": func(t *testing.T) string { return testenv.Postgres(t) },
}

func TestTriggers(t *testing.T) {
	for name, url := range databases {
		t.Run(name, func(t *testing.T) {
			trstoretest.RunTriggers(t, func(t *testing.T) triggers.Store { return trstore.NewTriggers(open(t, url(t))) })
		})
	}
}

func TestJobs(t *testing.T) {
	for name, url := range databases {
		t.Run(name, func(t *testing.T) {
			trstoretest.RunJobs(t, func(t *testing.T) triggers.JobStore { return trstore.NewJobs(open(t, url(t))) })
		})
	}
}

// open returns a migrated database at url, closed when t ends.
func open(t *testing.T, url string) *gorm.DB {
	t.Helper()
	db, _, err := sqldb.Open(url, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Close(db) })
	if err := sqldb.Migrate(context.Background(), db, trstore.Migrations()); err != nil {
		t.Fatal(err)
	}
	return db
}
