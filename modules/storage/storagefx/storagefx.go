// Package storagefx provides the storage module: the database, with the
// migrations every module adds to sqldb.MigrationsGroup applied at start.
// The Blobs implementation is chosen by app from the configuration.
package storagefx

import (
	"context"
	"log/slog"

	"go.uber.org/fx"
	"gorm.io/gorm"

	"sless.kube5s.ru/sless/modules/server"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// Config configures the storage module.
type Config struct {
	// DatabaseURL is a URL sqldb.ParseURL accepts.
	DatabaseURL string
}

// Module is the storage module.
var Module = fx.Module("storage",
	fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "storage") }),
	fx.Provide(
		newDB,
		fx.Annotate(readyCheck, fx.ResultTags(server.ReadyChecksGroup)),
	),
)

type dbParams struct {
	fx.In
	LC         fx.Lifecycle
	Config     Config
	Migrations []sqldb.Migration `group:"sqldb.migrations"`
	Log        *slog.Logger
}

func newDB(p dbParams) (*gorm.DB, error) {
	db, dialect, err := sqldb.Open(p.Config.DatabaseURL, p.Log)
	if err != nil {
		return nil, err
	}
	p.LC.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			if err := sqldb.Ping(ctx, db); err != nil {
				return err
			}
			p.Log.Info("database ready", "dialect", dialect, "migrations", len(p.Migrations))
			return sqldb.Migrate(ctx, db, p.Migrations)
		},
		OnStop: func(context.Context) error { return sqldb.Close(db) },
	})
	return db, nil
}

func readyCheck(db *gorm.DB) server.ReadyCheck {
	return server.ReadyCheck{Name: "database", Check: func(ctx context.Context) error { return sqldb.Ping(ctx, db) }}
}
