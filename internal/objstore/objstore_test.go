package objstore_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"

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
