// Package invokefx provides the invoke module: /fn and the Invoker (proxy),
// the invocation ledger and its REST API.
package invokefx

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"gorm.io/gorm"

	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/invoke/ledger"
	"sless.kube5s.ru/sless/modules/invoke/ledger/journal"
	"sless.kube5s.ru/sless/modules/invoke/ledgerapi"
	"sless.kube5s.ru/sless/modules/invoke/proxy"
	"sless.kube5s.ru/sless/modules/server"
	"sless.kube5s.ru/sless/modules/server/httpx"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// Config configures the invoke module.
type Config struct {
	Proxy proxy.Config
	// Retention is how long invocations are kept; 0 keeps them forever.
	Retention time.Duration
	// Journal configures the ledger's journal; its Dir is required.
	Journal journal.Options
}

// Module is the invoke module.
var Module = fx.Module("invoke",
	fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "invoke") }),
	fx.Provide(
		fx.Annotate(ledger.Migrations, fx.ResultTags(sqldb.MigrationsGroup)),
		newLedger,
		func(l *ledger.Ledger) invoke.Ledger { return l },
		fx.Annotate(readyCheck, fx.ResultTags(server.ReadyChecksGroup)),
		func(c Config) proxy.Config { return c.Proxy },
		proxy.New,
		func(p *proxy.Proxy) invoke.Invoker { return p },
		httpx.AsRoutes(func(p *proxy.Proxy) *proxy.Proxy { return p }),
		httpx.AsRoutes(ledgerapi.New),
	),
)

// newLedger starts the ledger's writer with the module and stops it after
// the HTTP server drained, so that every answered invocation is written or
// left in the journal.
func newLedger(lc fx.Lifecycle, c Config, db *gorm.DB, reg *prometheus.Registry, log *slog.Logger) (*ledger.Ledger, error) {
	l, err := ledger.New(db, ledger.Options{Journal: c.Journal, Retention: c.Retention, Log: log, Metrics: reg})
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{OnStart: l.Start, OnStop: l.Stop})
	return l, nil
}

func readyCheck(l *ledger.Ledger) server.ReadyCheck {
	return server.ReadyCheck{Name: "ledger", Check: l.Check}
}
