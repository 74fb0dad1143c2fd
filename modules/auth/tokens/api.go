package tokens

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/auth"
	"sless.kube5s.ru/sless/modules/server/httpx"
)

// MaxDescription is the longest description of a token, in bytes.
const MaxDescription = 200

// API serves /v1/tokens to admin tokens only.
type API struct {
	store *Store
	log   *slog.Logger
}

// NewAPI returns the API.
func NewAPI(store *Store, log *slog.Logger) *API { return &API{store: store, log: log} }

// Register implements httpx.Routes.
func (a *API) Register(v1 *gin.RouterGroup, _ *gin.Engine) {
	g := v1.Group("/tokens", requireAdmin)
	g.POST("", httpx.Handle(a.log, a.create))
	g.GET("", httpx.Handle(a.log, a.list))
	g.DELETE("/:id", httpx.Handle(a.log, a.revoke))
}

func requireAdmin(c *gin.Context) {
	if p, _ := auth.FromContext(c.Request.Context()); !p.AllNamespaces {
		c.AbortWithStatusJSON(http.StatusForbidden, httpx.ErrorBody{Error: "only an admin token (the server's API token) manages tokens"})
	}
}

func (a *API) create(c *gin.Context) error {
	var req auth.TokenRequest
	if err := httpx.DecodeJSON(c, &req); err != nil {
		return err
	}
	errs := &validation.Errors{Resource: "token"}
	errs.Namespace("namespace", req.Namespace)
	if req.Function != "" {
		errs.Name("function", req.Function)
	}
	if len(req.Description) > MaxDescription {
		errs.Add("description", "is %d bytes; the limit is %d", len(req.Description), MaxDescription)
	}
	const maxTTL = int64(100 * 365 * 24 * 3600)
	if req.TTLSeconds < 0 || req.TTLSeconds > maxTTL {
		errs.Add("ttl_seconds", "must be from 0 (no expiry) to %d", maxTTL)
	}
	if err := errs.Err(); err != nil {
		return err
	}
	t, secret, err := a.store.Create(c, auth.Token{Namespace: req.Namespace, Function: req.Function, Description: req.Description},
		time.Duration(req.TTLSeconds)*time.Second)
	if err != nil {
		return err
	}
	a.log.InfoContext(c, "token created", "token_id", t.ID, "namespace", t.Namespace, "function", t.Function)
	c.JSON(http.StatusCreated, auth.NewToken{Token: *t, Secret: secret})
	return nil
}

func (a *API) list(c *gin.Context) error {
	limit, err := httpx.PageLimit(c)
	if err != nil {
		return err
	}
	items, more, err := a.store.List(c, c.Query("continue"), limit)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, httpx.NewListResponse(items, more, func(t *auth.Token) string { return t.ID }))
	return nil
}

func (a *API) revoke(c *gin.Context) error {
	id := c.Param("id")
	err := a.store.Revoke(c, id)
	if errors.Is(err, ErrNotFound) {
		return httpx.Errorf(http.StatusNotFound, "token %q not found", id)
	}
	if err != nil {
		return err
	}
	a.log.InfoContext(c, "token revoked", "token_id", id)
	c.Status(http.StatusNoContent)
	return nil
}
