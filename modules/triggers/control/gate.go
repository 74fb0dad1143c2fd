// Package control runs triggers and jobs: the reconcilers that bring them to
// their desired state, the gate that decides which functions /fn serves, and
// the keeper of triggers' status.
package control

import (
	"sync"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/triggers"
)

// Gate implements invoke.Exposure from the enabled http triggers. The
// trigger reconciler is its only writer; /fn reads it on every request.
type Gate struct {
	mu sync.RWMutex
	// opened maps an enabled http trigger to what it opens.
	opened map[triggers.Key]opening
	// triggers and private count the enabled http triggers of a function,
	// and those of them that require a token.
	triggers, private map[functions.Key]int
}

// opening is what one enabled http trigger opens: its function, to anyone
// or to token holders only.
type opening struct {
	function functions.Key
	token    bool
}

// NewGate returns a gate that exposes nothing.
func NewGate() *Gate {
	return &Gate{opened: map[triggers.Key]opening{}, triggers: map[functions.Key]int{}, private: map[functions.Key]int{}}
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

// set records what the trigger key opens (the zero opening for nothing) and
// returns the functions whose exposure changed (not their privacy: that
// changes no instance).
func (g *Gate) set(key triggers.Key, o opening) []functions.Key {
	g.mu.Lock()
	defer g.mu.Unlock()
	old, had := g.opened[key]
	switch {
	case old == o:
		return nil
	case had && old.function == o.function:
		// Only the auth changed.
		g.opened[key] = o
		if o.token {
			g.private[o.function]++
		} else {
			decrement(g.private, o.function)
		}
		return nil
	}
	var changed []functions.Key
	if had {
		delete(g.opened, key)
		if old.token {
			decrement(g.private, old.function)
		}
		if decrement(g.triggers, old.function) {
			changed = append(changed, old.function)
		}
	}
	if o.function != (functions.Key{}) {
		g.opened[key] = o
		if o.token {
			g.private[o.function]++
		}
		if g.triggers[o.function]++; g.triggers[o.function] == 1 {
			changed = append(changed, o.function)
		}
	}
	return changed
}

// decrement lowers k's count and reports whether it reached zero.
func decrement(counts map[functions.Key]int, k functions.Key) bool {
	if counts[k]--; counts[k] > 0 {
		return false
	}
	delete(counts, k)
	return true
}
