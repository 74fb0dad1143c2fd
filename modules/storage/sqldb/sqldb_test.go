package sqldb_test

import (
	"bytes"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"gorm.io/gorm"

	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

type item struct {
	ID   int64
	Name string `gorm:"uniqueIndex"`
}

// A statement refused for a reason the caller answers (not found: 404,
// duplicate: 409) is not a database failure: it is no error in the log.
func TestLogOfRefusedStatements(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	db, _, err := sqldb.Open("sqlite:"+filepath.Join(t.TempDir(), "test.db"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Close(db) })
	if err := db.AutoMigrate(&item{}); err != nil {
		t.Fatal(err)
	}
	if err := db.Create(&item{Name: "a"}).Error; err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		run       func() error
		want      error
		wantError bool
	}{
		{"duplicate", func() error { return db.Create(&item{Name: "a"}).Error }, gorm.ErrDuplicatedKey, false},
		{"not found", func() error { return db.Where("name = ?", "b").First(&item{}).Error }, gorm.ErrRecordNotFound, false},
		{"broken", func() error { return db.Exec("SELECT * FROM no_such_table").Error }, nil, true},
	} {
		logs.Reset()
		err := tc.run()
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: got error %v, want %v", tc.name, err, tc.want)
		}
		if got := strings.Contains(logs.String(), "level=ERROR"); got != tc.wantError {
			t.Errorf("%s: logged an error: %v, want %v; log:\n%s", tc.name, got, tc.wantError, logs.String())
		}
	}
}
