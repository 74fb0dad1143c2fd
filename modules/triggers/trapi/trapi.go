// Package trapi serves the REST API of triggers
// (/v1/namespaces/{ns}/triggers) and jobs (/v1/namespaces/{ns}/jobs).
package trapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/invoke/ledgerapi"
	"sless.kube5s.ru/sless/modules/server/httpx"
	"sless.kube5s.ru/sless/modules/triggers"
)

// API is the triggers and jobs REST API.
type API struct {
	triggers  triggers.Store
	jobs      triggers.JobStore
	functions functions.Store
	types     *triggers.Types
	ledger    invoke.Ledger
	notify    triggers.ChangeNotifier
	log       *slog.Logger
}

// New returns the API of the triggers of types.
func New(trs triggers.Store, jobs triggers.JobStore, fns functions.Store, types *triggers.Types, ledger invoke.Ledger,
	notify triggers.ChangeNotifier, log *slog.Logger) *API {
	return &API{triggers: trs, jobs: jobs, functions: fns, types: types, ledger: ledger, notify: notify, log: log}
}

// Register implements httpx.Routes.
func (a *API) Register(v1 *gin.RouterGroup, _ *gin.Engine) {
	t := v1.Group("/namespaces/:ns/triggers")
	t.POST("", a.handle(a.createTrigger))
	t.GET("", a.handle(a.listTriggers))
	t.GET("/:name", a.handle(a.getTrigger))
	t.PUT("/:name", a.handle(a.updateTrigger))
	t.DELETE("/:name", a.handle(a.deleteTrigger))
	t.GET("/:name/invocations", a.handle(a.triggerInvocations))
	j := v1.Group("/namespaces/:ns/jobs")
	j.POST("", a.handle(a.createJob))
	j.GET("", a.handle(a.listJobs))
	j.GET("/:name", a.handle(a.getJob))
	j.PUT("/:name", a.handle(a.updateJob))
	j.DELETE("/:name", a.handle(a.deleteJob))
	j.GET("/:name/invocations", a.handle(a.jobInvocations))
}

func (a *API) handle(h httpx.HandlerFunc) gin.HandlerFunc { return httpx.Handle(a.log, h) }

func key(c *gin.Context) triggers.Key {
	return triggers.Key{Namespace: c.Param("ns"), Name: c.Param("name")}
}

// checkFunction refuses a spec whose function does not exist.
func (a *API) checkFunction(c *gin.Context, kind, ns, fn string) error {
	_, err := a.functions.Get(c, functions.Key{Namespace: ns, Name: fn})
	if errors.Is(err, functions.ErrNotFound) {
		ve := &validation.Errors{Resource: kind}
		ve.Add("function", "function %q does not exist in namespace %q", fn, ns)
		return ve
	}
	return err
}

// recheckFunction closes the race with a delete of the function that ran
// between checkFunction and the write of a trigger or job: that delete has
// already deleted the function's dependents, once before and once after
// the function itself, so an object written after its second pass would
// outlive the function and come back to life with a function of the same
// name. Checked again after the write, such an object is removed and the
// request refused, as if the function had been missing from the start.
func (a *API) recheckFunction(c *gin.Context, kind, ns, fn string, remove func() error) error {
	err := a.checkFunction(c, kind, ns, fn)
	var ve *validation.Errors
	if !errors.As(err, &ve) {
		return err
	}
	if rerr := remove(); rerr != nil && !errors.Is(rerr, triggers.ErrNotFound) {
		return fmt.Errorf("removing the %s of a deleted function: %w", kind, rerr)
	}
	return err
}

func notFound(err error, kind string, k triggers.Key) error {
	if errors.Is(err, triggers.ErrNotFound) {
		return httpx.Errorf(http.StatusNotFound, "%s %q not found in namespace %q", kind, k.Name, k.Namespace)
	}
	return err
}

func conflict(err error, kind string, k triggers.Key) error {
	if errors.Is(err, triggers.ErrAlreadyExists) {
		return httpx.Errorf(http.StatusConflict, "%s %q already exists in namespace %q; use PUT to update it", kind, k.Name, k.Namespace)
	}
	return err
}

// redacted returns t as the API shows it: without secrets.
func (a *API) redacted(t *triggers.Trigger) *triggers.Trigger { return triggers.Redacted(t, a.types) }

// decodeTrigger reads, completes and checks the trigger of a create or an
// update (old is the stored trigger of an update, nil for a create).
func (a *API) decodeTrigger(c *gin.Context, old *triggers.Trigger) (*triggers.Trigger, error) {
	var t triggers.Trigger
	if err := httpx.DecodeJSON(c, &t); err != nil {
		return nil, err
	}
	if err := httpx.BindNames(c, "trigger", &t.Namespace, &t.Name, old != nil); err != nil {
		return nil, err
	}
	// A client that read the trigger sends the redacted URL back: that
	// means "unchanged", not a new password of "***".
	if old != nil {
		triggers.Unredact(&t, old, a.types)
	}
	triggers.ApplyDefaults(&t, a.types)
	if err := triggers.Validate(&t, a.types); err != nil {
		return nil, err
	}
	return &t, a.checkFunction(c, "trigger", t.Namespace, t.Function)
}

func (a *API) createTrigger(c *gin.Context) error {
	t, err := a.decodeTrigger(c, nil)
	if err != nil {
		return err
	}
	created, err := a.triggers.Create(c, t)
	if err != nil {
		return conflict(err, "trigger", t.Key())
	}
	err = a.recheckFunction(c, "trigger", t.Namespace, t.Function, func() error { return a.triggers.Delete(c, created.Key()) })
	a.notify.TriggerChanged(created.Key())
	if err != nil {
		return err
	}
	c.JSON(http.StatusCreated, a.redacted(created))
	return nil
}

func (a *API) listTriggers(c *gin.Context) error {
	limit, err := httpx.PageLimit(c)
	if err != nil {
		return err
	}
	items, more, err := a.triggers.List(c, c.Param("ns"), triggers.ListOptions{Limit: limit, After: c.Query("continue")})
	if err != nil {
		return err
	}
	shown := make([]*triggers.Trigger, len(items))
	for i, t := range items {
		shown[i] = a.redacted(t)
	}
	c.JSON(http.StatusOK, httpx.NewListResponse(shown, more, func(t *triggers.Trigger) string { return t.Name }))
	return nil
}

func (a *API) getTrigger(c *gin.Context) error {
	t, err := a.triggers.Get(c, key(c))
	if err != nil {
		return notFound(err, "trigger", key(c))
	}
	c.JSON(http.StatusOK, a.redacted(t))
	return nil
}

func (a *API) updateTrigger(c *gin.Context) error {
	k := key(c)
	old, err := a.triggers.Get(c, k)
	if err != nil {
		return notFound(err, "trigger", k)
	}
	t, err := a.decodeTrigger(c, old)
	if err != nil {
		return err
	}
	updated, err := a.triggers.UpdateSpec(c, k, t.Spec)
	if err != nil {
		return notFound(err, "trigger", k)
	}
	err = a.recheckFunction(c, "trigger", k.Namespace, t.Function, func() error { return a.triggers.Delete(c, k) })
	a.notify.TriggerChanged(k)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, a.redacted(updated))
	return nil
}

func (a *API) deleteTrigger(c *gin.Context) error {
	k := key(c)
	if err := a.triggers.Delete(c, k); err != nil {
		return notFound(err, "trigger", k)
	}
	a.notify.TriggerChanged(k)
	c.Status(http.StatusNoContent)
	return nil
}

// invocationParams are the query parameters of the invocations of a trigger
// or a job.
var invocationParams = []string{"limit", "continue", "status"}

func (a *API) triggerInvocations(c *gin.Context) error {
	t, err := a.triggers.Get(c, key(c))
	if err != nil {
		return notFound(err, "trigger", key(c))
	}
	q, err := ledgerapi.ParseQuery(c, invocationParams)
	if err != nil {
		return err
	}
	q.TriggerKind, q.TriggerName = t.Type, t.Name
	if t.Type == triggers.TypeHTTP {
		// /fn does not know which http trigger let a request in.
		q.Function, q.TriggerName = t.Function, ""
	}
	return ledgerapi.WriteList(c, a.ledger, q)
}

// decodeJob reads, completes and checks the job of a create or an update.
func (a *API) decodeJob(c *gin.Context, update bool) (*triggers.Job, error) {
	var j triggers.Job
	if err := httpx.DecodeJSON(c, &j); err != nil {
		return nil, err
	}
	if err := httpx.BindNames(c, "job", &j.Namespace, &j.Name, update); err != nil {
		return nil, err
	}
	triggers.ApplyJobDefaults(&j)
	if err := triggers.ValidateJob(&j); err != nil {
		return nil, err
	}
	return &j, a.checkFunction(c, "job", j.Namespace, j.Function)
}

func (a *API) createJob(c *gin.Context) error {
	j, err := a.decodeJob(c, false)
	if err != nil {
		return err
	}
	created, err := a.jobs.Create(c, j)
	if err != nil {
		return conflict(err, "job", j.Key())
	}
	err = a.recheckFunction(c, "job", j.Namespace, j.Function, func() error { return a.jobs.Delete(c, created.Key()) })
	a.notify.JobChanged(created.Key())
	if err != nil {
		return err
	}
	c.JSON(http.StatusCreated, created)
	return nil
}

func (a *API) listJobs(c *gin.Context) error {
	limit, err := httpx.PageLimit(c)
	if err != nil {
		return err
	}
	items, more, err := a.jobs.List(c, c.Param("ns"), triggers.ListOptions{Limit: limit, After: c.Query("continue")})
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, httpx.NewListResponse(items, more, func(j *triggers.Job) string { return j.Name }))
	return nil
}

func (a *API) getJob(c *gin.Context) error {
	j, err := a.jobs.Get(c, key(c))
	if err != nil {
		return notFound(err, "job", key(c))
	}
	c.JSON(http.StatusOK, j)
	return nil
}

func (a *API) updateJob(c *gin.Context) error {
	k := key(c)
	j, err := a.decodeJob(c, true)
	if err != nil {
		return err
	}
	updated, err := a.jobs.UpdateSpec(c, k, j.JobSpec)
	if err != nil {
		return notFound(err, "job", k)
	}
	err = a.recheckFunction(c, "job", k.Namespace, j.Function, func() error { return a.jobs.Delete(c, k) })
	a.notify.JobChanged(k)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, updated)
	return nil
}

func (a *API) deleteJob(c *gin.Context) error {
	k := key(c)
	if err := a.jobs.Delete(c, k); err != nil {
		return notFound(err, "job", k)
	}
	a.notify.JobChanged(k)
	c.Status(http.StatusNoContent)
	return nil
}

func (a *API) jobInvocations(c *gin.Context) error {
	if _, err := a.jobs.Get(c, key(c)); err != nil {
		return notFound(err, "job", key(c))
	}
	q, err := ledgerapi.ParseQuery(c, invocationParams)
	if err != nil {
		return err
	}
	q.TriggerKind, q.TriggerName = invoke.KindJob, c.Param("name")
	return ledgerapi.WriteList(c, a.ledger, q)
}
