// Package control runs triggers and jobs: the reconcilers that bring them to
// their desired state, the gate that decides which functions /fn serves, and
// the keeper of triggers' status.
package control

import (
	"sync"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/triggers"
)

// Gate implements invoke.Exposure from the enabled http triggers. The
// trigger reconciler is its only writer; /fn reads it on every request.
type Gate struct {
	mu sync.RWMutex
	// functionOf maps an enabled http trigger to its function.
	functionOf map[triggers.Key]functions.Key
	// triggers counts the enabled http triggers of a function.
	triggers map[functions.Key]int
}

// NewGate returns a gate that exposes nothing.
func NewGate() *Gate {
	return &Gate{functionOf: map[triggers.Key]functions.Key{}, triggers: map[functions.Key]int{}}
}

// Exposed implements invoke.Exposure.
func (g *Gate) Exposed(ns, function string) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.triggers[functions.Key{Namespace: ns, Name: function}] > 0
}

// set records whether the trigger key exposes function (the zero Key for
// none) and returns the functions whose exposure changed.
func (g *Gate) set(key triggers.Key, function functions.Key) []functions.Key {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.functionOf[key]
	if old == function {
		return nil
	}
	var changed []functions.Key
	if old != (functions.Key{}) {
		delete(g.functionOf, key)
		if g.triggers[old]--; g.triggers[old] == 0 {
			delete(g.triggers, old)
			changed = append(changed, old)
		}
	}
	if function != (functions.Key{}) {
		g.functionOf[key] = function
		if g.triggers[function]++; g.triggers[function] == 1 {
			changed = append(changed, function)
		}
	}
	return changed
}
