package prune

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"sless.kube5s.ru/sless/modules/functions"
)

// store serves Keys and Get from a map; the other methods are not used.
type store struct {
	functions.Store
	fns map[functions.Key]*functions.Function
	err error
}

func (s *store) Keys(context.Context) ([]functions.Key, error) {
	var keys []functions.Key
	for k := range s.fns {
		keys = append(keys, k)
	}
	return keys, s.err
}

func (s *store) Get(_ context.Context, k functions.Key) (*functions.Function, error) {
	if fn, ok := s.fns[k]; ok {
		return fn, nil
	}
	return nil, functions.ErrNotFound
}

func (s *store) serve(name, artifact string) {
	fn := &functions.Function{Namespace: "default", Name: name}
	fn.Status.Artifact = artifact
	s.fns[fn.Key()] = fn
}

// pruner keeps a set of artifacts; returnedAt is when a Build last returned
// each.
type pruner struct {
	artifacts  []string
	returnedAt map[string]time.Time
	removed    []string
}

func (p *pruner) Artifacts(context.Context) ([]string, error) { return slices.Clone(p.artifacts), nil }

func (p *pruner) RemoveUnused(_ context.Context, a string, since time.Time) (bool, error) {
	if !p.returnedAt[a].Before(since) {
		return false, nil
	}
	p.artifacts = slices.DeleteFunc(p.artifacts, func(x string) bool { return x == a })
	p.removed = append(p.removed, a)
	return true, nil
}

func newCollector(s *store, p *pruner, now *time.Time) *Collector {
	c := New(s, p, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c.now = func() time.Time { return *now }
	return c
}

func collect(t *testing.T, c *Collector, want int) {
	t.Helper()
	if n, err := c.Collect(context.Background()); n != want || err != nil {
		t.Fatalf("Collect() = %d, %v; want %d removed", n, err, want)
	}
}

func TestRemovesAfterGrace(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &store{fns: map[functions.Key]*functions.Function{}}
	s.serve("a", "/art/a")
	p := &pruner{artifacts: []string{"/art/a", "/art/old"}, returnedAt: map[string]time.Time{}}
	c := newCollector(s, p, &now)

	collect(t, c, 0) // notes /art/old
	now = now.Add(59 * time.Minute)
	collect(t, c, 0)
	now = now.Add(time.Minute)
	collect(t, c, 1)
	if !slices.Equal(p.removed, []string{"/art/old"}) {
		t.Errorf("removed %q; want only the unused artifact", p.removed)
	}
}

func TestUseRestartsTheGrace(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &store{fns: map[functions.Key]*functions.Function{}}
	p := &pruner{artifacts: []string{"/art/x", "/art/y"}, returnedAt: map[string]time.Time{}}
	c := newCollector(s, p, &now)

	collect(t, c, 0) // notes both
	// A function serves from x for a while, then moves on.
	now = now.Add(30 * time.Minute)
	s.serve("f", "/art/x")
	// A build returned y after it was noted, for a function not yet recorded.
	p.returnedAt["/art/y"] = now
	collect(t, c, 0)
	s.serve("f", "/art/z")
	now = now.Add(30 * time.Minute)
	collect(t, c, 0) // x noted again, now; y refused and noted again, now
	now = now.Add(59 * time.Minute)
	collect(t, c, 0)
	now = now.Add(time.Minute)
	collect(t, c, 2)
}

func TestRemovesNothingWithoutEveryFunction(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &store{fns: map[functions.Key]*functions.Function{}}
	p := &pruner{artifacts: []string{"/art/x"}, returnedAt: map[string]time.Time{}}
	c := newCollector(s, p, &now)
	collect(t, c, 0)
	now = now.Add(2 * time.Hour)
	s.err = errors.New("database down")
	if n, err := c.Collect(context.Background()); n != 0 || err == nil {
		t.Errorf("Collect() with the store failing = %d, %v; want nothing removed and the error", n, err)
	}
	if len(p.removed) != 0 {
		t.Errorf("removed %q while the functions could not be read", p.removed)
	}
}
