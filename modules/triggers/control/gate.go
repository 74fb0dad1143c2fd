// Package control runs triggers and jobs in this process (the embedded
// mode): Local applies the desired state that package reconcile decides to
// the gate that decides which functions /fn serves, to the runners and to
// the keeper of triggers' status; the job reconciler runs jobs.
package control

import (
	"context"
	"sync"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/reconcile"
)

// Gate implements invoke.Exposure from the enabled http triggers. The
// trigger reconciler is its only writer; /fn reads it on every request.
type Gate struct {
	mu sync.RWMutex
	// opened maps an active http trigger to what it opens.
	opened map[triggers.Key]reconcile.Exposure
	// triggers and private count the enabled http triggers of a function,
	// and those of them that require a token.
	triggers, private map[functions.Key]int
}

// NewGate returns a gate that exposes nothing.
func NewGate() *Gate {
	return &Gate{opened: map[triggers.Key]reconcile.Exposure{}, triggers: map[functions.Key]int{}, private: map[functions.Key]int{}}
}

// Access implements invoke.Exposure: a function is exposed while it has an
// enabled http trigger, and private while any of them requires a token (the
// stricter trigger wins, so adding a private trigger never leaves the
// function public).
func (g *Gate) Access(ns, function string) invoke.Access {
	k := functions.Key{Namespace: ns, Name: function}
	g.mu.RLock()
	defer g.mu.RUnlock()
	return invoke.Access{Exposed: g.triggers[k] > 0, TokenRequired: g.private[k] > 0}
}

// set records what the trigger key opens (the zero Exposure for nothing) and
// returns the functions whose exposure changed (not their privacy: that
// changes no instance).
func (g *Gate) set(key triggers.Key, o reconcile.Exposure) []functions.Key {
	g.mu.Lock()
	defer g.mu.Unlock()
	old, had := g.opened[key]
	switch {
	case old == o:
		return nil
	case had && old.Function == o.Function:
		// Only the auth changed.
		g.opened[key] = o
		if o.TokenRequired {
			g.private[o.Function]++
		} else {
			decrement(g.private, o.Function)
		}
		return nil
	}
	var changed []functions.Key
	if had {
		delete(g.opened, key)
		if old.TokenRequired {
			decrement(g.private, old.Function)
		}
		if decrement(g.triggers, old.Function) {
			changed = append(changed, old.Function)
		}
	}
	if o.Function != (functions.Key{}) {
		g.opened[key] = o
		if o.TokenRequired {
			g.private[o.Function]++
		}
		if g.triggers[o.Function]++; g.triggers[o.Function] == 1 {
			changed = append(changed, o.Function)
		}
	}
	return changed
}

// GateApplier implements reconcile.Applier with the gate alone: it opens
// and closes /fn as the triggers say, and neither runs them nor writes
// their status. In the cluster mode every replica serves /fn and keeps its
// gate with one, while the leader alone applies triggers with Local.
type GateApplier struct {
	gate *Gate
}

var _ reconcile.Applier = GateApplier{}

// NewGateApplier returns the applier of gate.
func NewGateApplier(gate *Gate) GateApplier { return GateApplier{gate: gate} }

// Apply implements reconcile.Applier.
func (a GateApplier) Apply(_ context.Context, t *triggers.Trigger, d reconcile.Desired) error {
	a.gate.set(t.Key(), d.Exposure)
	return nil
}

// Remove implements reconcile.Applier.
func (a GateApplier) Remove(key triggers.Key) { a.gate.set(key, reconcile.Exposure{}) }

// decrement lowers k's count and reports whether it reached zero.
func decrement(counts map[functions.Key]int, k functions.Key) bool {
	if counts[k]--; counts[k] > 0 {
		return false
	}
	delete(counts, k)
	return true
}
