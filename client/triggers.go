package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/triggers"
)

func objPath(kind, ns, name string) string {
	p := "/v1/namespaces/" + url.PathEscape(ns) + "/" + kind
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

// listAll follows the pages of a list call.
func listAll[T any](ctx context.Context, c *Client, path string) ([]T, error) {
	var all []T
	after := ""
	for {
		var page struct {
			Items    []T    `json:"items"`
			Continue string `json:"continue"`
		}
		p := path + "?limit=" + fmt.Sprint(validation.MaxPageSize)
		if after != "" {
			p += "&continue=" + url.QueryEscape(after)
		}
		if err := c.doJSON(ctx, http.MethodGet, p, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.Continue == "" {
			return all, nil
		}
		after = page.Continue
	}
}

// CreateTrigger creates t in its namespace.
func (c *Client) CreateTrigger(ctx context.Context, t *triggers.Trigger) (*triggers.Trigger, error) {
	var out triggers.Trigger
	return &out, c.doJSON(ctx, http.MethodPost, objPath("triggers", t.Namespace, ""), t, &out)
}

// UpdateTrigger replaces the spec of t.
func (c *Client) UpdateTrigger(ctx context.Context, t *triggers.Trigger) (*triggers.Trigger, error) {
	var out triggers.Trigger
	return &out, c.doJSON(ctx, http.MethodPut, objPath("triggers", t.Namespace, t.Name), t, &out)
}

// GetTrigger returns one trigger (its broker password redacted).
func (c *Client) GetTrigger(ctx context.Context, ns, name string) (*triggers.Trigger, error) {
	var out triggers.Trigger
	return &out, c.doJSON(ctx, http.MethodGet, objPath("triggers", ns, name), nil, &out)
}

// ListTriggers returns every trigger of a namespace.
func (c *Client) ListTriggers(ctx context.Context, ns string) ([]*triggers.Trigger, error) {
	return listAll[*triggers.Trigger](ctx, c, objPath("triggers", ns, ""))
}

// DeleteTrigger deletes a trigger.
func (c *Client) DeleteTrigger(ctx context.Context, ns, name string) error {
	return c.do(ctx, http.MethodDelete, objPath("triggers", ns, name), nil, "", nil)
}

// CreateJob creates j in its namespace.
func (c *Client) CreateJob(ctx context.Context, j *triggers.Job) (*triggers.Job, error) {
	var out triggers.Job
	return &out, c.doJSON(ctx, http.MethodPost, objPath("jobs", j.Namespace, ""), j, &out)
}

// UpdateJob replaces the spec of j.
func (c *Client) UpdateJob(ctx context.Context, j *triggers.Job) (*triggers.Job, error) {
	var out triggers.Job
	return &out, c.doJSON(ctx, http.MethodPut, objPath("jobs", j.Namespace, j.Name), j, &out)
}

// GetJob returns one job.
func (c *Client) GetJob(ctx context.Context, ns, name string) (*triggers.Job, error) {
	var out triggers.Job
	return &out, c.doJSON(ctx, http.MethodGet, objPath("jobs", ns, name), nil, &out)
}

// ListJobs returns every job of a namespace.
func (c *Client) ListJobs(ctx context.Context, ns string) ([]*triggers.Job, error) {
	return listAll[*triggers.Job](ctx, c, objPath("jobs", ns, ""))
}

// DeleteJob deletes a job.
func (c *Client) DeleteJob(ctx context.Context, ns, name string) error {
	return c.do(ctx, http.MethodDelete, objPath("jobs", ns, name), nil, "", nil)
}

// WaitJob polls a job until the run runID has finished.
func (c *Client) WaitJob(ctx context.Context, ns, name string, runID int64) (*triggers.Job, error) {
	interval := 25 * time.Millisecond
	for {
		j, err := c.GetJob(ctx, ns, name)
		if err != nil {
			return nil, err
		}
		if j.Status.RunID >= runID && (j.Status.Phase == triggers.JobSucceeded || j.Status.Phase == triggers.JobFailed) {
			return j, nil
		}
		select {
		case <-ctx.Done():
			return j, fmt.Errorf("waiting for job %s/%s: %w (phase %s)", ns, name, context.Cause(ctx), j.Status.Phase)
		case <-time.After(interval):
		}
		interval = min(interval*2, time.Second)
	}
}
