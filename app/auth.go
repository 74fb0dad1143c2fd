package app

import (
	"log/slog"

	"go.uber.org/fx"

	"sless.kube5s.ru/sless/modules/auth"
	"sless.kube5s.ru/sless/modules/auth/tokens"
	"sless.kube5s.ru/sless/modules/auth/webhook"
	"sless.kube5s.ru/sless/modules/server/httpx"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// authOptions provide the API's authenticator, a chain in this order: the
// server's own token (the admin), the stored tenant tokens, then the
// identity service when auth-webhook-url is set. A token is sent to the
// identity service only when the server does not know it.
func authOptions(c Config, token string) fx.Option {
	return fx.Module("auth",
		fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "auth") }),
		fx.Provide(
			fx.Annotate(tokens.Migrations, fx.ResultTags(sqldb.MigrationsGroup)),
			tokens.New,
			httpx.AsRoutes(tokens.NewAPI),
			func(stored *tokens.Store, log *slog.Logger) auth.Authenticator {
				chain := auth.Chain{auth.NewStaticToken(token), stored}
				if c.AuthWebhookURL != "" {
					chain = append(chain, webhook.New(webhook.Config{
						URL: c.AuthWebhookURL, BearerToken: c.AuthWebhookToken, Timeout: c.AuthWebhookTimeout,
						CacheTTL: c.AuthWebhookCacheTTL, NegativeCacheTTL: c.AuthWebhookNegativeCacheTTL,
					}, log))
					log.Info("tokens unknown to the server are reviewed by the identity service", "url", c.AuthWebhookURL)
				}
				return chain
			},
		),
	)
}
