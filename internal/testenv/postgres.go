package testenv

import (
	"cmp"
	"context"
	"database/sql"
	"net/url"
	"os"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// EnvPostgresURL names the variable holding the PostgreSQL server for tests,
// as a postgres:// URL (the key=value DSN form is not accepted).
const EnvPostgresURL = "SLESS_TEST_POSTGRES_URL"

// DefaultPostgresURL is used when SLESS_TEST_POSTGRES_URL is empty: the
// trust-auth server on the development and CI machines.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// postgresTimeout bounds connecting and creating the schema: a local server
// answers in milliseconds, and a missing one should skip the test quickly.
const postgresTimeout = 5 * time.Second

// Postgres returns a URL of the test database whose connections use a new,
// empty schema of their own (selected with the search_path runtime
// parameter, which pgx sends at connect time), so parallel tests and packages
// never see each other's tables. The schema is dropped with everything in it
// when t ends; the test must have closed its connections by then (a
// t.Cleanup registered after Postgres runs before the drop). A server that
// cannot be reached makes the test Unavailable.
func Postgres(t testing.TB) string {
	t.Helper()
	raw := cmp.Or(os.Getenv(EnvPostgresURL), DefaultPostgresURL)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", EnvPostgresURL, err)
	}
	db, err := sql.Open("pgx", raw)
	if err != nil {
		t.Fatalf("open PostgreSQL at %s: %v", u.Redacted(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), postgresTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		Unavailable(t, "PostgreSQL at %s (from %s) is unreachable: %v", u.Redacted(), EnvPostgresURL, err)
		return ""
	}
	schema := "test_" + randomHex(8)
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		db.Close()
		t.Fatalf("create schema %s in %s: %v", schema, u.Redacted(), err)
	}
	t.Cleanup(func() { dropSchema(t, db, schema) })
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// dropSchema removes a test's schema and closes the connection that made it.
func dropSchema(t testing.TB, db *sql.DB, schema string) {
	defer db.Close()
	// t.Context is already cancelled when cleanups run.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
		t.Errorf("drop schema %s (does the test still hold a connection in a transaction?): %v", schema, err)
	}
}
