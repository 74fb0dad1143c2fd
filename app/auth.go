package app

import (
	"log/slog"

	"go.uber.org/fx"

	"sless.kube5s.ru/sless/internal/auth"
	"sless.kube5s.ru/sless/internal/auth/tokens"
	"sless.kube5s.ru/sless/internal/httpx"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// authOptions provide the API's authenticator: the chain of the server's
// own token, then the stored tenant tokens.
func authOptions(token string) fx.Option {
	return fx.Module("auth",
		fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "auth") }),
		fx.Provide(
			fx.Annotate(tokens.Migrations, fx.ResultTags(sqldb.MigrationsGroup)),
			tokens.New,
			httpx.AsRoutes(tokens.NewAPI),
			func(stored *tokens.Store) auth.Authenticator {
				return auth.Chain{auth.NewStaticToken(token), stored}
			},
		),
	)
}
