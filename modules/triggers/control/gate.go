// Package control runs triggers and jobs: the reconcilers that bring them to
// their desired state, the gate that decides which functions /fn serves, and
// the keeper of triggers' status.
package control

import (
	"sync"

	"sless.kube5s.ru/sless/modules/triggers"
)

// Gate implements invoke.Exposure from the enabled http triggers. The
// trigger reconciler is its only writer; /fn reads it on every request.
type Gate struct {
	mu sync.RWMutex
	// functionOf maps an enabled http trigger to its function's "ns/name".
	functionOf map[triggers.Key]string
	// triggers counts the enabled http triggers of a function.
	triggers map[string]int
}

// NewGate returns a gate that exposes nothing.
func NewGate() *Gate {
	return &Gate{functionOf: map[triggers.Key]string{}, triggers: map[string]int{}}
}

// Exposed implements invoke.Exposure.
func (g *Gate) Exposed(ns, function string) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.triggers[ns+"/"+function] > 0
}

// set records whether the trigger key exposes function ("" for none) and
// returns the functions whose exposure changed.
func (g *Gate) set(key triggers.Key, function string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.functionOf[key]
	if old == function {
		return nil
	}
	var changed []string
	if old != "" {
		delete(g.functionOf, key)
		if g.triggers[old]--; g.triggers[old] == 0 {
			delete(g.triggers, old)
			changed = append(changed, old)
		}
	}
	if function != "" {
		g.functionOf[key] = function
		if g.triggers[function]++; g.triggers[function] == 1 {
			changed = append(changed, function)
		}
	}
	return changed
}
