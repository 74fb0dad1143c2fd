// Package prune removes the build artifacts that no function uses any more:
// those of deleted functions and of code that was replaced. An artifact is
// removed once no function has referenced it for a grace period, long enough
// for instances of the replaced code to drain and for a build that just
// returned it to record it on its function.
package prune

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"sless.kube5s.ru/sless/internal/periodic"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/functions"
)

// Collector finds and removes unused artifacts. Collect is not safe for
// concurrent use; Start runs it periodically.
type Collector struct {
	store  functions.Store
	pruner build.Pruner
	grace  time.Duration
	log    *slog.Logger
	now    func() time.Time

	// unusedSince holds when each unreferenced artifact was first seen so.
	unusedSince map[string]time.Time
	loop        *periodic.Loop
}

// New returns a collector that removes an artifact once no function has
// referenced it for grace.
func New(store functions.Store, pruner build.Pruner, grace time.Duration, log *slog.Logger) *Collector {
	return &Collector{store: store, pruner: pruner, grace: grace, log: log, now: time.Now, unusedSince: map[string]time.Time{}}
}

// Collect makes one pass: it notes the artifacts that no function
// references and removes those it noted grace or longer ago, returning how
// many it removed. It removes nothing when it cannot read every function.
func (c *Collector) Collect(ctx context.Context) (int, error) {
	// Functions first, artifacts second: an artifact built meanwhile is
	// listed without its function and only noted.
	used, err := c.referenced(ctx)
	if err != nil {
		return 0, err
	}
	artifacts, err := c.pruner.Artifacts(ctx)
	if err != nil {
		return 0, err
	}
	now := c.now()
	// Only the artifacts listed and unused now are carried to the next pass.
	next := map[string]time.Time{}
	removed := 0
	var errs []error
	for _, a := range artifacts {
		if used[a] {
			continue
		}
		since, seen := c.unusedSince[a]
		if !seen || now.Sub(since) < c.grace {
			next[a] = cmp.Or(since, now)
			continue
		}
		ok, err := c.pruner.RemoveUnused(ctx, a, since)
		switch {
		case err != nil:
			errs = append(errs, err)
			next[a] = since
		case !ok: // a build returned it since: look again from now on
			next[a] = now
		default:
			removed++
		}
	}
	c.unusedSince = next
	return removed, errors.Join(errs...)
}

// referenced returns the artifacts that functions serve from.
func (c *Collector) referenced(ctx context.Context) (map[string]bool, error) {
	keys, err := c.store.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the functions: %w", err)
	}
	used := make(map[string]bool, len(keys))
	for _, k := range keys {
		fn, err := c.store.Get(ctx, k)
		if errors.Is(err, functions.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("reading function %s/%s: %w", k.Namespace, k.Name, err)
		}
		if fn.Status.Artifact != "" {
			used[fn.Status.Artifact] = true
		}
	}
	return used, nil
}

// Start runs Collect now and then a few times per grace period (so that an
// artifact goes soon after its grace ends) until Stop, logging failures. It
// returns at once.
func (c *Collector) Start(ctx context.Context) error {
	c.loop = periodic.Start(ctx, max(c.grace/4, time.Second), func(ctx context.Context) {
		removed, err := c.Collect(ctx)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("removing unused build artifacts failed; retrying later", "error", err)
		}
		if removed > 0 {
			c.log.Info("removed unused build artifacts", "count", removed)
		}
	})
	return nil
}

// Stop stops the periodic collection, waiting for a pass in progress.
func (c *Collector) Stop(context.Context) error {
	if c.loop != nil {
		c.loop.Stop()
	}
	return nil
}
