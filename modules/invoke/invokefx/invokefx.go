// Package invokefx provides the invoke module: /fn and the Invoker (proxy)
// and the REST API of invocations (Module), and, for app/ to pick, the
// invocation ledger that drains a local journal into the database
// (SQLLedger).
package invokefx

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"gorm.io/gorm"

	"sless.kube5s.ru/sless/internal/procs"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/invoke/ledger"
	"sless.kube5s.ru/sless/modules/invoke/ledger/journal"
	"sless.kube5s.ru/sless/modules/invoke/ledgerapi"
	"sless.kube5s.ru/sless/modules/invoke/proxy"
	"sless.kube5s.ru/sless/modules/server"
	"sless.kube5s.ru/sless/modules/server/httpx"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
	"sless.kube5s.ru/sless/modules/tracing"
)

// Config configures the invoke module.
type Config struct {
	// Proxy bounds what /fn and the Invoker pass through.
	Proxy proxy.Config
}

// LedgerConfig configures SQLLedger.
type LedgerConfig struct {
	// Retention is how long invocations are kept; 0 keeps them forever.
	Retention time.Duration
	// Journal configures the ledger's journal; its Dir is required.
	Journal journal.Options
}

// Module is the invoke module. It needs an invoke.Ledger, which app/
// picks.
var Module = fx.Module("invoke",
	logger,
	fx.Provide(
		func(c Config) proxy.Config { return c.Proxy },
		// Constructed after the ledger and before the HTTP server, the
		// proxy stops after the server and before the ledger.
		fx.Annotate(proxy.New, fx.OnStop(func(ctx context.Context, p *proxy.Proxy) error { return p.Stop(ctx) })),
		func(p *proxy.Proxy) invoke.Invoker { return p },
		httpx.AsRoutes(func(p *proxy.Proxy) *proxy.Proxy { return p }),
		httpx.AsRoutes(ledgerapi.New),
	),
	fx.Invoke(attachProxy),
)

// attachParams: the exporter is there only when spans are exported, the
// governor only when the server's CPUs are sized to its work.
type attachParams struct {
	fx.In
	Registry *prometheus.Registry
	Proxy    *proxy.Proxy
	Tracer   tracing.Exporter `optional:"true"`
	Procs    *procs.Governor  `optional:"true"`
}

// attachProxy registers the invocations' series. When spans are exported, it
// makes the proxy export theirs; when the server's CPUs are sized to its
// work, it makes the proxy raise them while many invocations are in flight.
func attachProxy(p attachParams) error {
	if p.Tracer != nil {
		p.Proxy.Trace(p.Tracer)
	}
	if p.Procs != nil {
		p.Proxy.RaiseProcs(p.Procs)
	}
	return p.Registry.Register(p.Proxy.Metrics())
}

// SQLLedger provides invoke.Ledger with the ledger that appends records to
// a journal under the data directory and drains it into the database in
// batches, its migrations and its readiness check.
var SQLLedger = fx.Module("invoke-ledger",
	logger,
	fx.Provide(
		fx.Annotate(ledger.Migrations, fx.ResultTags(sqldb.MigrationsGroup)),
		newLedger,
		func(l *ledger.Ledger) invoke.Ledger { return l },
		fx.Annotate(readyCheck, fx.ResultTags(server.ReadyChecksGroup)),
	),
)

var logger = fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "invoke") })

// newLedger starts the ledger's writer with the module and stops it after
// the HTTP server drained, so that every answered invocation is written or
// left in the journal.
func newLedger(lc fx.Lifecycle, c LedgerConfig, db *gorm.DB, reg *prometheus.Registry, log *slog.Logger) (*ledger.Ledger, error) {
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
