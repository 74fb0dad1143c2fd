package storagefx_test

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"gorm.io/gorm"

	"sless.kube5s.ru/sless/modules/storage/sqldb"
	"sless.kube5s.ru/sless/modules/storage/storagefx"
)

func TestModuleMigratesOnStart(t *testing.T) {
	type thing struct{ ID int }
	migration := sqldb.Migration{Module: "test", Version: 1, Name: "things",
		Up: func(tx *gorm.DB) error { return tx.Migrator().CreateTable(&thing{}) }}
	var db *gorm.DB
	app := fxtest.New(t,
		storagefx.Module,
		fx.Supply(storagefx.Config{DatabaseURL: "sqlite:" + filepath.Join(t.TempDir(), "db")}),
		fx.Supply(slog.New(slog.NewTextHandler(io.Discard, nil))),
		fx.Supply(fx.Annotate([]sqldb.Migration{migration}, fx.ResultTags(sqldb.MigrationsGroup))),
		fx.Populate(&db),
	)
	app.RequireStart()
	if !db.Migrator().HasTable(&thing{}) {
		t.Error("the module's migration did not run at start")
	}
	app.RequireStop()
}

func TestModuleFailsOnBrokenMigrations(t *testing.T) {
	gap := sqldb.Migration{Module: "test", Version: 2, Name: "gap", Up: func(*gorm.DB) error { return nil }}
	app := fx.New(
		storagefx.Module,
		fx.Supply(storagefx.Config{DatabaseURL: "sqlite:" + filepath.Join(t.TempDir(), "db")}),
		fx.Supply(slog.New(slog.NewTextHandler(io.Discard, nil))),
		fx.Supply(fx.Annotate([]sqldb.Migration{gap}, fx.ResultTags(sqldb.MigrationsGroup))),
		fx.Invoke(func(*gorm.DB) {}),
		fx.NopLogger,
	)
	err := app.Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), "got version 2, want 1") {
		app.Stop(t.Context())
		t.Fatalf("start: got %v; want an error about the version gap", err)
	}
}
