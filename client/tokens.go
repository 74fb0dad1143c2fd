package client

import (
	"context"
	"net/http"
	"net/url"

	"sless.kube5s.ru/sless/modules/auth"
)

// CreateToken makes a tenant token (admin only). The answer carries the
// token's secret, which the server shows only this once.
func (c *Client) CreateToken(ctx context.Context, req auth.TokenRequest) (*auth.NewToken, error) {
	var out auth.NewToken
	return &out, c.doJSON(ctx, http.MethodPost, "/v1/tokens", req, &out)
}

// ListTokens returns every tenant token, without secrets, following pages
// (admin only).
func (c *Client) ListTokens(ctx context.Context) ([]*auth.Token, error) {
	return listAll[*auth.Token](ctx, c, "/v1/tokens")
}

// RevokeToken revokes a token by id (admin only).
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/tokens/"+url.PathEscape(id), nil, "", nil)
}
