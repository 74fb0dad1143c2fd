// Package fnmetrics keeps the phase of every function for Prometheus, as the
// reconciler last set it.
package fnmetrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"sless.kube5s.ru/sless/modules/functions"
)

var phaseDesc = prometheus.NewDesc("sless_function_phase",
	"Phase of a function: 1 for its current phase (Pending, Building, Ready, Failed), 0 for the others.",
	[]string{"namespace", "function", "phase"}, nil)

var phases = []functions.Phase{functions.PhasePending, functions.PhaseBuilding, functions.PhaseReady, functions.PhaseFailed}

// Phases is a prometheus.Collector of the functions' phases and the
// reconciler's reconcile.PhaseObserver.
type Phases struct {
	mu     sync.Mutex
	phases map[functions.Key]functions.Phase
}

// New returns an empty collector.
func New() *Phases { return &Phases{phases: map[functions.Key]functions.Phase{}} }

// Phase records the phase of the function key; "" forgets a deleted one.
func (p *Phases) Phase(key functions.Key, phase functions.Phase) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if phase == "" {
		delete(p.phases, key)
		return
	}
	p.phases[key] = phase
}

// Describe implements prometheus.Collector.
func (p *Phases) Describe(ch chan<- *prometheus.Desc) { ch <- phaseDesc }

// Collect implements prometheus.Collector.
func (p *Phases) Collect(ch chan<- prometheus.Metric) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, current := range p.phases {
		for _, ph := range phases {
			v := 0.0
			if ph == current {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(phaseDesc, prometheus.GaugeValue, v, key.Namespace, key.Name, string(ph))
		}
	}
}
