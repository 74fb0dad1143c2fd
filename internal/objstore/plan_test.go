package objstore

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"gorm.io/gorm"

	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// TestByFunctionUsesItsIndex checks SQLite's plan of the ByFunction query:
// a function's objects are looked up in the (namespace, function) index, not
// found by walking every object of the namespace.
func TestByFunctionUsesItsIndex(t *testing.T) {
	ctx := context.Background()
	db, _, err := sqldb.Open("sqlite:"+filepath.Join(t.TempDir(), "db.sqlite"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Close(db) })
	if err := sqldb.Migrate(ctx, db, []sqldb.Migration{Migration("test", 1, "things")}); err != nil {
		t.Fatal(err)
	}
	query := db.ToSQL(func(tx *gorm.DB) *gorm.DB {
		var rows []row
		return byFunction(tx.Table("things"), "ns", "fn").Find(&rows)
	})
	var plan []struct {
		ID, Parent, Notused int
		Detail              string
	}
	if err := db.Raw("EXPLAIN QUERY PLAN " + query).Scan(&plan).Error; err != nil {
		t.Fatal(err)
	}
	var details []string
	for _, p := range plan {
		details = append(details, p.Detail)
	}
	if got := strings.Join(details, "; "); !strings.Contains(got, "things_ns_function (namespace=? AND function=?)") {
		t.Errorf("plan of %q is %q; want a search of things_ns_function on both columns", query, got)
	}
}
