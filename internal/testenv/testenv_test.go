package testenv_test

import (
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"sless.kube5s.ru/sless/internal/testenv"
)

// recorder is a testing.TB that records Skipf and Fatalf instead of ending
// the goroutine.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Skipf(format string, args ...any)  { r.skipped = fmt.Sprintf(format, args...) }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		env          string
		skip, failed bool
	}{
		{env: "", skip: true},
		{env: "0", skip: true},
		{env: "1", failed: true},
		{env: "true", failed: true},
		{env: "yes", failed: true}, // a typo fails rather than skips
	} {
		t.Run("env="+tc.env, func(t *testing.T) {
			t.Setenv(testenv.EnvRequireServices, tc.env)
			r := &recorder{TB: t}
			testenv.Unavailable(r, "service %s is down", "X")
			// The recorder returns from Fatalf, so Skipf may follow it; a
			// real T stops at Fatalf.
			if (r.failed != "") != tc.failed || tc.skip && r.skipped == "" {
				t.Fatalf("skipped %q, failed %q; want skip=%t fail=%t", r.skipped, r.failed, tc.skip, tc.failed)
			}
			msg := r.failed + r.skipped
			if !strings.Contains(msg, testenv.EnvRequireServices) {
				t.Errorf("message %q does not name %s", msg, testenv.EnvRequireServices)
			}
			if tc.env != "yes" && !strings.Contains(msg, "service X is down") {
				t.Errorf("message %q lacks the reason", msg)
			}
		})
	}
}

func TestRepoRoot(t *testing.T) {
	root := testenv.RepoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "hack", "tools.sh")); err != nil {
		t.Errorf("RepoRoot = %s, which has no hack/tools.sh: %v", root, err)
	}
}

func TestPostgres(t *testing.T) {
	var schema string
	t.Run("use", func(t *testing.T) {
		raw := testenv.Postgres(t)
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		schema = u.Query().Get("search_path")
		db := openDB(t, raw)
		if _, err := db.Exec("CREATE TABLE probe (id int)"); err != nil {
			t.Fatalf("create table through the returned URL: %v", err)
		}
		var got string
		err = db.QueryRow("SELECT table_schema FROM information_schema.tables WHERE table_name = 'probe'").Scan(&got)
		if err != nil || got != schema {
			t.Fatalf("table probe is in schema %q (%v); want %q", got, err, schema)
		}
	})
	if t.Skipped() || schema == "" {
		return
	}
	db := openDB(t, testenv.Postgres(t))
	var n int
	err := db.QueryRow("SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1", schema).Scan(&n)
	if err != nil || n != 0 {
		t.Errorf("schema %s after its test: count %d, %v; want it dropped", schema, n, err)
	}
}

func openDB(t *testing.T, raw string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestS3(t *testing.T) {
	srv := testenv.S3(t)
	first, second := srv.NewBucketURL(), srv.NewBucketURL()
	if first == second {
		t.Errorf("NewBucketURL returned %s twice", first)
	}
	u, err := url.Parse(first)
	if err != nil {
		t.Fatal(err)
	}
	bucket := u.Host
	ctx := t.Context()

	client := newClient(t, srv, srv.AccessKey, srv.SecretKey)
	if err := client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: srv.Region}); err != nil {
		t.Fatalf("MakeBucket with the server's credentials: %v", err)
	}
	bad := newClient(t, srv, srv.AccessKey, srv.SecretKey+"x")
	if _, err := bad.BucketExists(ctx, bucket); err == nil {
		t.Error("BucketExists with a wrong secret key succeeded; the server must check signatures")
	}
}

func newClient(t *testing.T, srv testenv.S3Server, access, secret string) *minio.Client {
	t.Helper()
	c, err := minio.New(srv.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(access, secret, ""),
		Region:       srv.Region,
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestS3Separate checks that each call gets its own server.
func TestS3Separate(t *testing.T) {
	a, b := testenv.S3(t), testenv.S3(t)
	if a.Endpoint == b.Endpoint || a.SecretKey == b.SecretKey {
		t.Errorf("two servers share endpoint or credentials: %+v, %+v", a, b)
	}
}
