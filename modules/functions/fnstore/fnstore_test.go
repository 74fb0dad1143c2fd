package fnstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/functions/fnstore"
	"sless.kube5s.ru/sless/modules/functions/fnstoretest"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// The conformance suite runs on both databases.
func TestStoreSQLite(t *testing.T) {
	fnstoretest.Run(t, func(t *testing.T) functions.Store {
		return newStore(t, "sqlite:"+filepath.Join(t.TempDir(), "db.sqlite"))
	})
}

func TestStorePostgres(t *testing.T) {
	fnstoretest.Run(t, func(t *testing.T) functions.Store { return newStore(t, testenv.Postgres(t)) })
}

func newStore(t testing.TB, url string) *fnstore.Store {
	t.Helper()
	_, s := newStoreDB(t, url)
	return s
}

func newStoreDB(t testing.TB, url string) (*gorm.DB, *fnstore.Store) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, _, err := sqldb.Open(url, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Close(db) })
	if err := sqldb.Migrate(context.Background(), db, fnstore.Migrations()); err != nil {
		t.Fatal(err)
	}
	// Migrating again is a no-op.
	if err := sqldb.Migrate(context.Background(), db, fnstore.Migrations()); err != nil {
		t.Fatalf("second migration: %v", err)
	}
	return db, fnstore.New(db)
}

// A database of version 1 keeps serving its artifacts with the runtime and
// handler they were built for (the spec's, then) after the upgrade.
func TestMigrationFromVersion1(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, _, err := sqldb.Open("sqlite:"+filepath.Join(t.TempDir(), "db"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Close(db) })
	if err := sqldb.Migrate(ctx, db, fnstore.Migrations()[:1]); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO functions (namespace, name, runtime, handler, env, timeout_seconds, memory_mb, min_instances, max_instances,
			concurrency, code_sha256, generation, status_phase, status_message, status_code_sha256, status_build_log,
			status_observed_generation, status_artifact, status_build_key)
			VALUES ('default', 'built', 'nodejs20', 'main.run', '{}', 30, 256, 0, 10, 1, 'c1', 2, 'Ready', '', 'c1', '', 2, '/art/1', 'k1')`,
		`INSERT INTO functions (namespace, name, runtime, handler, env, timeout_seconds, memory_mb, min_instances, max_instances,
			concurrency, code_sha256, generation, status_phase, status_message, status_code_sha256, status_build_log,
			status_observed_generation, status_artifact, status_build_key)
			VALUES ('default', 'new', 'nodejs20', 'main.run', '{}', 30, 256, 0, 10, 1, '', 1, 'Pending', '', '', '', 0, '', '')`,
	} {
		if err := db.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := sqldb.Migrate(ctx, db, fnstore.Migrations()); err != nil {
		t.Fatal(err)
	}
	s := fnstore.New(db)
	for name, want := range map[string][2]string{"built": {"nodejs20", "main.run"}, "new": {"", ""}} {
		fn, err := s.Get(ctx, functions.Key{Namespace: "default", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if got := [2]string{fn.Status.ArtifactRuntime, fn.Status.ArtifactHandler}; got != want || fn.Status.Conditions != nil {
			t.Errorf("%s: artifact runtime and handler %q, conditions %v; want %q and none", name, got, fn.Status.Conditions, want)
		}
	}
}

// BenchmarkGet reads one function of 1,000, as every reconcile of a function
// and every upload does.
func BenchmarkGet(b *testing.B) {
	s := newStore(b, "sqlite:"+filepath.Join(b.TempDir(), "db.sqlite"))
	ctx := context.Background()
	for i := range 1000 {
		fn := &functions.Function{Namespace: "default", Name: fmt.Sprintf("fn-%04d", i), Spec: functions.Spec{Runtime: "python3.11"}}
		if _, err := s.Create(ctx, fn); err != nil {
			b.Fatal(err)
		}
	}
	key := functions.Key{Namespace: "default", Name: "fn-0500"}
	for b.Loop() {
		if _, err := s.Get(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
}

// Writes and reads at once on a store whose prepared statements are new
// never wait on each other. A write used to be a transaction of an UPDATE and
// a SELECT; holding SQLite's write lock, it could wait for the SELECT that a
// concurrent Get was preparing on the pool, while every pooled connection was
// held by the transaction or by writers waiting for its lock (the server's
// first deploys stalled for the 10 s busy timeout, then failed with
// SQLITE_BUSY). One connection in the pool makes that wait happen on most
// runs; the production pool of four meets it when three writers wait.
func TestConcurrentWritesAndReadsOnNewStatements(t *testing.T) {
	for round := range 20 {
		db, s := newStoreDB(t, "sqlite:"+filepath.Join(t.TempDir(), fmt.Sprint("db", round)))
		sqlDB, err := db.DB()
		if err != nil {
			t.Fatal(err)
		}
		sqlDB.SetMaxOpenConns(1)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		k := functions.Key{Namespace: "ns", Name: "f"}
		if _, err := s.Create(ctx, &functions.Function{Namespace: "ns", Name: "f", Spec: functions.Spec{Runtime: "python3.11"}}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 4 {
			wg.Go(func() {
				if _, err := s.SetCode(ctx, k, "abc"); err != nil {
					errs <- fmt.Errorf("SetCode: %w", err)
				}
			})
			wg.Go(func() {
				if _, err := s.Get(ctx, k); err != nil {
					errs <- fmt.Errorf("Get: %w", err)
				}
			})
		}
		wg.Wait()
		cancel()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v (want every call to finish within 5 s)", round, err)
		}
	}
}
