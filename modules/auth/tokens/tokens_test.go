package tokens

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/auth"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

func TestStoreSQLite(t *testing.T) {
	runSuite(t, func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "db.sqlite") })
}

func TestStorePostgres(t *testing.T) {
	runSuite(t, func(t *testing.T) string { return testenv.Postgres(t) })
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func newStore(t testing.TB, url string) *Store {
	t.Helper()
	db, _, err := sqldb.Open(url, discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Close(db) })
	for range 2 { // migrating again is a no-op
		if err := sqldb.Migrate(context.Background(), db, Migrations()); err != nil {
			t.Fatal(err)
		}
	}
	return New(db)
}

func runSuite(t *testing.T, newURL func(t *testing.T) string) {
	ctx := context.Background()
	s := newStore(t, newURL(t))
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s.now = func() time.Time { return now }

	forever, secret, err := s.Create(ctx, auth.Token{Namespace: "team-a", Description: "ci"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, Prefix) || len(secret) < 40 || forever.ExpiresAt != nil || !strings.HasPrefix(forever.ID, "tok_") {
		t.Fatalf("created %+v with secret %q; want a tok_ id, no expiry and a long %s secret", forever, secret, Prefix)
	}
	now = now.Add(time.Second)
	invoker, invokerSecret, err := s.Create(ctx, auth.Token{Namespace: "team-b", Function: "hook"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if invoker.ExpiresAt == nil || !invoker.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("expires at %v; want %v", invoker.ExpiresAt, now.Add(time.Hour))
	}

	tests := []struct {
		name, token string
		at          time.Time
		want        auth.Principal
		wantErr     error
	}{
		{"tenant token", secret, now, auth.Principal{Namespace: "team-a"}, nil},
		{"invoker token", invokerSecret, now.Add(59 * time.Minute), auth.Principal{Namespace: "team-b", Function: "hook"}, nil},
		{"expired", invokerSecret, now.Add(time.Hour), auth.Principal{}, auth.ErrExpired},
		{"unknown", Prefix + "nope", now, auth.Principal{}, auth.ErrUnauthenticated},
		{"empty", "", now, auth.Principal{}, auth.ErrUnauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.now = func() time.Time { return tt.at }
			got, err := s.Authenticate(ctx, tt.token)
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("got %+v, %v; want %+v, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}

	first, more, err := s.List(ctx, "", 1)
	if err != nil || len(first) != 1 || !more {
		t.Fatalf("first page: %+v, more %v, %v; want one token and more", first, more, err)
	}
	rest, more, err := s.List(ctx, first[0].ID, 10)
	if err != nil || len(rest) != 1 || more {
		t.Fatalf("second page: %+v, more %v, %v; want the other token and no more", rest, more, err)
	}
	byID := map[string]*auth.Token{first[0].ID: first[0], rest[0].ID: rest[0]}
	if byID[forever.ID] == nil || byID[invoker.ID] == nil || byID[forever.ID].Description != "ci" || first[0].ID > rest[0].ID {
		t.Fatalf("pages %+v and %+v; want both tokens in id order", first[0], rest[0])
	}
	if err := s.Revoke(ctx, forever.ID); err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return now }
	if _, err := s.Authenticate(ctx, secret); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("revoked token: got %v; want it refused", err)
	}
	if err := s.Revoke(ctx, forever.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("revoking again: got %v; want ErrNotFound", err)
	}
}

// BenchmarkAuthenticate measures the lookup every request with a stored
// token makes (SQLite, one of 1,000 tokens).
func BenchmarkAuthenticate(b *testing.B) {
	s := newStore(b, "sqlite:"+filepath.Join(b.TempDir(), "db.sqlite"))
	ctx := context.Background()
	var secret string
	for i := range 1000 {
		_, sec, err := s.Create(ctx, auth.Token{Namespace: "team-a"}, 0)
		if err != nil {
			b.Fatal(err)
		}
		if i == 500 {
			secret = sec
		}
	}
	for b.Loop() {
		if _, err := s.Authenticate(ctx, secret); err != nil {
			b.Fatal(err)
		}
	}
}
