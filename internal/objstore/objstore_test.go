package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/objstore"
	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/meta"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

type spec struct{ Function string }
type status struct{ Phase string }

func TestKeys(t *testing.T) {
	for name, url := range map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "db.sqlite") },
		"postgres": func(t *testing.T) string { return testenv.Postgres(t) },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db, _, err := sqldb.Open(url(t), slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sqldb.Close(db) })
			if err := sqldb.Migrate(ctx, db, []sqldb.Migration{objstore.Migration("test", 1, "things")}); err != nil {
				t.Fatal(err)
			}
			s := objstore.New[spec, status](db, "things", "thing", objstore.Errors{NotFound: errors.New("not found"), AlreadyExists: errors.New("exists")})
			for _, k := range []meta.Key{{Namespace: "b", Name: "x"}, {Namespace: "a", Name: "z"}, {Namespace: "a", Name: "y"}} {
				if _, err := s.Create(ctx, &objstore.Object[spec, status]{Namespace: k.Namespace, Name: k.Name, Function: "f"}); err != nil {
					t.Fatal(err)
				}
			}
			keys, err := s.Keys(ctx)
			if want := []meta.Key{{Namespace: "a", Name: "y"}, {Namespace: "a", Name: "z"}, {Namespace: "b", Name: "x"}}; err != nil || !slices.Equal(keys, want) {
				t.Errorf("Keys() = %v, %v; want %v", keys, err, want)
			}
		})
	}
}

// UpdateSpec and Get at once on new prepared statements never wait on each
// other; see fnstore's TestConcurrentWritesAndReadsOnNewStatements, whose
// deadlock an UpdateSpec of an UPDATE and a SELECT in a transaction met too.
func TestConcurrentUpdatesAndReadsOnNewStatements(t *testing.T) {
	for round := range 20 {
		db, _, err := sqldb.Open("sqlite:"+filepath.Join(t.TempDir(), fmt.Sprint("db", round)), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sqldb.Close(db) })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := sqldb.Migrate(ctx, db, []sqldb.Migration{objstore.Migration("test", 1, "things")}); err != nil {
			t.Fatal(err)
		}
		sqlDB, err := db.DB()
		if err != nil {
			t.Fatal(err)
		}
		sqlDB.SetMaxOpenConns(1)
		s := objstore.New[spec, status](db, "things", "thing", objstore.Errors{NotFound: errors.New("not found"), AlreadyExists: errors.New("exists")})
		if _, err := s.Create(ctx, &objstore.Object[spec, status]{Namespace: "ns", Name: "x", Function: "f"}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 4 {
			wg.Go(func() {
				if _, err := s.UpdateSpec(ctx, "ns", "x", "g", spec{Function: "g"}); err != nil {
					errs <- fmt.Errorf("UpdateSpec: %w", err)
				}
			})
			wg.Go(func() {
				if _, err := s.Get(ctx, "ns", "x"); err != nil {
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
