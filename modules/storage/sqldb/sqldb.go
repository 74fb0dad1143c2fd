// Package sqldb opens the relational database (SQLite for the embedded mode,
// PostgreSQL otherwise) through gorm and runs the modules' versioned
// migrations.
package sqldb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/libtnb/sqlite"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"sless.kube5s.ru/sless/internal/durable"
)

// Dialect names the database behind a *gorm.DB.
type Dialect string

// Supported dialects.
const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// ParseURL returns the dialect of a database URL and the DSN its driver
// takes. Accepted forms: "postgres://..." or "postgresql://..."; "sqlite:PATH",
// "sqlite://PATH" or a bare file path for SQLite.
func ParseURL(raw string) (Dialect, string, error) {
	switch {
	case raw == "":
		return "", "", fmt.Errorf("database URL is empty")
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		if _, err := url.Parse(raw); err != nil {
			return "", "", fmt.Errorf("database URL is not a valid postgres URL: %w", redact(err))
		}
		return Postgres, raw, nil
	case strings.HasPrefix(raw, "sqlite://"):
		return SQLite, strings.TrimPrefix(raw, "sqlite://"), nil
	case strings.HasPrefix(raw, "sqlite:"):
		return SQLite, strings.TrimPrefix(raw, "sqlite:"), nil
	case strings.Contains(raw, "://"):
		scheme, _, _ := strings.Cut(raw, "://")
		return "", "", fmt.Errorf("database URL scheme %q is not supported; use postgres:// or sqlite:PATH", scheme)
	}
	return SQLite, raw, nil
}

// redact drops the URL (which may hold a password) from a url.Parse error.
func redact(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// Open prepares the database named by rawURL without connecting (Ping
// connects). SQLite files get WAL journaling, a busy timeout and immediate
// write transactions, so that concurrent writers wait instead of failing with
// "database is locked".
//
// The contract of both databases: a write is durable when it returns. It
// survives a crash of the server and a power cut, so that what the API
// answered (a function created, a status written) is there after either.
// PostgreSQL keeps it with its defaults (synchronous_commit on, fsync on).
// SQLite's writes run one at a time and return once an fsync of the WAL
// that began after their commit has ended, an fsync that the writes ending
// meanwhile share (see commits); a read returns once what it may have seen
// is durable. SQLite's own synchronous NORMAL, without that fsync, loses on
// a power cut every commit since the last checkpoint (up to 1,000 pages of
// them), as the power-cut tests of e2e/fault showed. A transaction of its
// own is written through Write.
func Open(rawURL string, log *slog.Logger) (*gorm.DB, Dialect, error) {
	dialect, dsn, err := ParseURL(rawURL)
	if err != nil {
		return nil, "", err
	}
	cfg := &gorm.Config{
		Logger:                 newLogger(log),
		SkipDefaultTransaction: true,
		NowFunc:                Now,
		TranslateError:         true,
		DisableAutomaticPing:   true,
	}
	var db *gorm.DB
	switch dialect {
	case SQLite:
		if err := durable.MkdirAll(filepath.Dir(dsn), 0o700); err != nil {
			return nil, "", fmt.Errorf("creating the database directory: %w", err)
		}
		// The database holds every function's env: SQLite would create it
		// (and its journals, which take its mode) readable by all.
		f, err := os.OpenFile(dsn, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o600)
		if err == nil {
			f.Close()
			// A new file's name survives a power cut once its directory
			// is fsynced.
			err = durable.SyncDir(filepath.Dir(dsn))
		} else if errors.Is(err, os.ErrExist) {
			err = nil
		}
		if err != nil {
			return nil, "", fmt.Errorf("creating the database file: %w", err)
		}
		// Preparing a statement costs SQLite about as much as running it
		// (fnstore's BenchmarkGet); PostgreSQL's driver caches its own.
		//
		// With gorm's statement cache, a gorm transaction on SQLite can
		// deadlock: holding the write lock, it waits for a statement that
		// another goroutine is preparing on the pool, while the pool's
		// connections are held by writers waiting for that lock. So no
		// store runs a gorm transaction on SQLite: a write is one statement
		// (UPDATE ... RETURNING), and the ledger's batches use database/sql.
		cfg.PrepareStmt, cfg.PrepareStmtMaxSize = true, 256
		db, err = gorm.Open(sqlite.Open(sqliteDSN(dsn)), cfg)
		if err == nil {
			err = db.Use(newCommits(dsn, log))
		}
	case Postgres:
		db, err = gorm.Open(postgres.Open(dsn), cfg)
	}
	if err != nil {
		return nil, "", fmt.Errorf("opening the %s database: %w", dialect, redact(err))
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, "", err
	}
	if dialect == SQLite {
		// One writer at a time is all SQLite allows; a small pool keeps
		// readers from queueing behind a writer without piling up waiters.
		sqlDB.SetMaxOpenConns(4)
	} else {
		sqlDB.SetMaxOpenConns(16)
		sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	}
	return db, dialect, nil
}

// Ping connects to the database and fails with a message that names the
// dialect (never the URL, which may hold a password).
func Ping(ctx context.Context, db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		return fmt.Errorf("connecting to the %s database: %w", db.Dialector.Name(), redact(err))
	}
	return nil
}

func sqliteDSN(path string) string {
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "busy_timeout(10000)", "synchronous(NORMAL)", "foreign_keys(1)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	return "file:" + path + "?" + q.Encode()
}

// Now returns the current time as both databases store it: UTC, with
// microsecond precision, so that what is written reads back equal.
func Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// Close closes the database's connection pool.
func Close(db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// newLogger routes gorm's messages to slog: errors and slow queries only.
func newLogger(log *slog.Logger) logger.Interface {
	return &gormLogger{log: log, slow: 500 * time.Millisecond}
}

// gormLogger renders a statement's SQL only when it logs it: gorm's own
// loggers format every statement with its arguments, which cost the
// invocation ledger's writer more than its inserts.
type gormLogger struct {
	log  *slog.Logger
	slow time.Duration
}

func (l *gormLogger) LogMode(logger.LogLevel) logger.Interface { return l }

// ParamsFilter keeps statements' arguments (such as functions' env values)
// out of the log.
func (l *gormLogger) ParamsFilter(_ context.Context, sql string, _ ...any) (string, []any) {
	return sql, nil
}

func (l *gormLogger) Info(ctx context.Context, msg string, args ...any) {
	l.log.InfoContext(ctx, fmt.Sprintf(msg, args...))
}

func (l *gormLogger) Warn(ctx context.Context, msg string, args ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(msg, args...))
}

func (l *gormLogger) Error(ctx context.Context, msg string, args ...any) {
	l.log.ErrorContext(ctx, fmt.Sprintf(msg, args...))
}

func (l *gormLogger) Trace(ctx context.Context, begin time.Time, fc func() (string, int64), err error) {
	elapsed := time.Since(begin)
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound) || errors.Is(err, gorm.ErrDuplicatedKey) || errors.Is(err, context.Canceled):
		// Answers the caller handles (404, 409) or stopped asking for:
		// not failures of the database.
		if l.log.Enabled(ctx, slog.LevelDebug) {
			sql, rows := fc()
			l.log.DebugContext(ctx, "database statement refused", "sql", sql, "rows", rows, "duration", elapsed, "error", err)
		}
	case err != nil:
		sql, rows := fc()
		l.log.ErrorContext(ctx, "database statement failed", "sql", sql, "rows", rows, "duration", elapsed, "error", err)
	case elapsed > l.slow:
		sql, rows := fc()
		l.log.WarnContext(ctx, "slow database statement", "sql", sql, "rows", rows, "duration", elapsed)
	}
}
