package sqldb_test

import (
	"bytes"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// A read returns only once every write that began before it ended is
// durable: here a write that committed and still runs holds the read back
// until it ends, so that what the read shows survives a power cut.
func TestReadsWaitForTheWritesTheyMaySee(t *testing.T) {
	db := openItems(t)
	committed, release := make(chan struct{}), make(chan struct{})
	written := make(chan error, 1)
	go func() {
		written <- sqldb.Write(db, func() error {
			err := db.Transaction(func(tx *gorm.DB) error { return tx.Create(&item{Name: "a"}).Error })
			close(committed)
			<-release
			return err
		})
	}()
	<-committed
	read := make(chan int64, 1)
	go func() {
		var n int64
		if err := db.Model(&item{}).Count(&n).Error; err != nil {
			t.Error(err)
		}
		read <- n
	}()
	select {
	case n := <-read:
		t.Fatalf("the read returned (%d items) while the write it may see still ran", n)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	if n := <-read; n != 1 {
		t.Errorf("the read saw %d items, want 1", n)
	}
}

// Writes run one at a time: a write, even a single statement, waits for
// the transaction that runs through Write.
func TestWritesRunOneAtATime(t *testing.T) {
	db := openItems(t)
	started, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- sqldb.Write(db, func() error {
			close(started)
			<-release
			return db.Transaction(func(tx *gorm.DB) error { return tx.Create(&item{Name: "a"}).Error })
		})
	}()
	<-started
	second := make(chan error, 1)
	go func() { second <- db.Create(&item{Name: "b"}).Error }()
	select {
	case err := <-second:
		t.Fatalf("a write ended (%v) while another ran", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	if err := db.Model(&item{}).Order("id").Pluck("name", &names).Error; err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "a,b" {
		t.Errorf("items in insert order: %v, want [a b]", names)
	}
}

// openItems opens a new SQLite database with the item table.
func openItems(t *testing.T) *gorm.DB {
	t.Helper()
	db, _, err := sqldb.Open("sqlite:"+filepath.Join(t.TempDir(), "test.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Close(db) })
	if err := db.AutoMigrate(&item{}); err != nil {
		t.Fatal(err)
	}
	return db
}
