package control

import (
	"context"
	"errors"
	"slices"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/triggers"
)

// Kinds of dependents, as the REST API names their collections.
const (
	KindTriggers = "triggers"
	KindJobs     = "jobs"
)

// Dependents implements functions.Dependents: a function's triggers and jobs
// are deleted with it.
type Dependents struct {
	triggers triggers.Store
	jobs     triggers.JobStore
	// stop stops a deleted trigger where it runs, before its reconcile.
	stop func(triggers.Key)
	// enqueueTriggers and enqueueJobs tell the reconcilers about the
	// deletions.
	enqueueTriggers, enqueueJobs func(triggers.Key)
}

// NewDependents returns the dependents of functions in the stores; stop
// stops a deleted trigger where it runs (Local.Remove in this process), and
// enqueueTriggers and enqueueJobs tell the reconcilers about the deletions.
// In the cluster mode the triggers run in another replica, the leader,
// whose reconcilers watch the deletions: there the three do nothing, and a
// deleted trigger stops when the leader sees its deletion.
func NewDependents(trs triggers.Store, jobs triggers.JobStore, stop, enqueueTriggers, enqueueJobs func(triggers.Key)) *Dependents {
	return &Dependents{triggers: trs, jobs: jobs, stop: stop, enqueueTriggers: enqueueTriggers, enqueueJobs: enqueueJobs}
}

// DeleteDependents implements functions.Dependents. A deleted trigger is
// stopped before it returns rather than at its next reconcile, which the
// reconciler still gets: one that was in the middle of applying the trigger
// stops it then.
func (d *Dependents) DeleteDependents(ctx context.Context, fn functions.Key) (map[string][]string, error) {
	trs, err := d.triggers.ByFunction(ctx, fn.Namespace, fn.Name)
	if err != nil {
		return nil, err
	}
	jobs, err := d.jobs.ByFunction(ctx, fn.Namespace, fn.Name)
	if err != nil {
		return nil, err
	}
	deleted := map[string][]string{KindTriggers: {}, KindJobs: {}}
	for _, t := range trs {
		if err := d.triggers.Delete(ctx, t.Key()); err != nil && !errors.Is(err, triggers.ErrNotFound) {
			return nil, err
		}
		d.stop(t.Key())
		d.enqueueTriggers(t.Key())
		deleted[KindTriggers] = append(deleted[KindTriggers], t.Name)
	}
	for _, j := range jobs {
		if err := d.jobs.Delete(ctx, j.Key()); err != nil && !errors.Is(err, triggers.ErrNotFound) {
			return nil, err
		}
		d.enqueueJobs(j.Key())
		deleted[KindJobs] = append(deleted[KindJobs], j.Name)
	}
	for _, names := range deleted {
		slices.Sort(names)
	}
	return deleted, nil
}
