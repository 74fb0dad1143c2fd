package client

import (
	"context"
	"net/http"

	"sless.kube5s.ru/sless/modules/triggers"
)

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
	return poll(ctx, "job "+ns+"/"+name, func() (*triggers.Job, error) { return c.GetJob(ctx, ns, name) },
		func(j *triggers.Job) (bool, string) {
			finished := j.Status.Phase == triggers.JobSucceeded || j.Status.Phase == triggers.JobFailed
			return j.Status.RunID >= runID && finished, "phase " + j.Status.Phase
		})
}

// WaitTriggerApplied polls a trigger until the server applied its generation
// gen, so that what it exposes or runs is in effect.
func (c *Client) WaitTriggerApplied(ctx context.Context, ns, name string, gen int64) (*triggers.Trigger, error) {
	return poll(ctx, "trigger "+ns+"/"+name, func() (*triggers.Trigger, error) { return c.GetTrigger(ctx, ns, name) },
		func(t *triggers.Trigger) (bool, string) {
			return t.Status.ObservedGeneration >= gen, "phase " + t.Status.Phase
		})
}

// WaitTriggerGone polls a trigger until the server answers 404 for it: once
// it returns, the trigger neither serves nor fires.
func (c *Client) WaitTriggerGone(ctx context.Context, ns, name string) error {
	_, err := poll(ctx, "trigger "+ns+"/"+name+" to be deleted", func() (bool, error) {
		_, err := c.GetTrigger(ctx, ns, name)
		if IsNotFound(err) {
			return true, nil
		}
		return false, err
	}, func(gone bool) (bool, string) { return gone, "it still exists" })
	return err
}
