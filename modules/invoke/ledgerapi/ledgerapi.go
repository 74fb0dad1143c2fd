// Package ledgerapi serves the invocation ledger's REST API: the
// invocations of a function or of a namespace, newest first, and one
// invocation with its logs.
package ledgerapi

import (
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/server/httpx"
)

// API is the invocations REST API.
type API struct {
	ledger invoke.Ledger
	log    *slog.Logger
}

// New returns the API.
func New(ledger invoke.Ledger, log *slog.Logger) *API {
	return &API{ledger: ledger, log: log}
}

// Register implements httpx.Routes.
func (a *API) Register(v1 *gin.RouterGroup, _ *gin.Engine) {
	g := v1.Group("/namespaces/:ns")
	g.GET("/functions/:name/invocations", a.handle(a.listFunction))
	g.GET("/invocations", a.handle(a.listNamespace))
	g.GET("/invocations/:id", a.handle(a.get))
}

func (a *API) handle(h httpx.HandlerFunc) gin.HandlerFunc { return httpx.Handle(a.log, h) }

// The query parameters of the list calls: the namespace-wide list also
// selects a function.
var (
	functionParams  = []string{"limit", "continue", "status", "trigger_kind", "trigger_name"}
	namespaceParams = append(slices.Clip(functionParams), "function")
)

func (a *API) listFunction(c *gin.Context) error {
	q, err := ParseQuery(c, functionParams)
	if err != nil {
		return err
	}
	q.Function = c.Param("name")
	return WriteList(c, a.ledger, q)
}

func (a *API) listNamespace(c *gin.Context) error {
	q, err := ParseQuery(c, namespaceParams)
	if err != nil {
		return err
	}
	q.Function = c.Query("function")
	return WriteList(c, a.ledger, q)
}

// WriteList answers with a page of q in the namespace of the URL's :ns, the
// invocations without their logs, newest first, paged like every list
// (httpx.ListResponse). The ledger checks the values of status,
// trigger_kind and continue: a
// *validation.Errors, which names the parameter, becomes a 400.
func WriteList(c *gin.Context, ledger invoke.Ledger, q invoke.Query) error {
	items, next, err := ledger.List(c, c.Param("ns"), q)
	if err != nil {
		return err
	}
	if items == nil {
		items = []*invoke.Record{}
	}
	c.JSON(http.StatusOK, httpx.ListResponse[*invoke.Record]{Items: items, Continue: next})
	return nil
}

// ParseQuery reads the list parameters, refusing any not in allowed: a
// misspelt filter would otherwise be ignored and list everything.
func ParseQuery(c *gin.Context, allowed []string) (invoke.Query, error) {
	errs := &validation.Errors{Resource: "invocation query"}
	for _, name := range slices.Sorted(maps.Keys(c.Request.URL.Query())) {
		if !slices.Contains(allowed, name) {
			errs.Add(name, "is not a parameter of this call; use %s", strings.Join(allowed, ", "))
		}
	}
	q := invoke.Query{
		Status: c.Query("status"), TriggerKind: c.Query("trigger_kind"), TriggerName: c.Query("trigger_name"),
		Continue: c.Query("continue"),
	}
	if s, ok := c.GetQuery("limit"); ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > validation.MaxPageSize {
			errs.Add("limit", "must be a number from 1 to %d (got %q)", validation.MaxPageSize, s)
		}
		q.Limit = n
	}
	return q, errs.Err()
}

func (a *API) get(c *gin.Context) error {
	ns, id := c.Param("ns"), c.Param("id")
	r, err := a.ledger.Get(c, ns, id)
	if errors.Is(err, invoke.ErrNotFound) {
		return httpx.Errorf(http.StatusNotFound, "invocation %q not found in namespace %q", id, ns)
	}
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, r)
	return nil
}
