// Package rtmetrics turns what an executor's data plane reports about its
// instances (runtime.StatsReporter) into Prometheus series, the same for
// every executor: a collector that asks at each scrape, so that nothing is
// counted on the invocation path and a function's series end with its
// deployment.
package rtmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"sless.kube5s.ru/sless/modules/runtime"
)

var (
	instancesDesc = prometheus.NewDesc("sless_instances",
		"Instances of a function by state: starting (a cold start or a prewarm), idle, busy (serving at least one invocation).",
		[]string{"namespace", "function", "state"}, nil)
	queuedDesc = prometheus.NewDesc("sless_invocations_queued",
		"Invocations of a function waiting for a free instance.",
		[]string{"namespace", "function"}, nil)
	memoryKillsDesc = prometheus.NewDesc("sless_instance_memory_kills_total",
		"Instances of a function killed for using more memory than its memory_mb, since it was deployed.",
		[]string{"namespace", "function"}, nil)
	restartsDesc = prometheus.NewDesc("sless_instance_restarts_total",
		"Instances of a function that ended because they crashed, were killed or timed out (and are replaced on demand), since it was deployed.",
		[]string{"namespace", "function"}, nil)
)

// Collector is a prometheus.Collector of an executor's instances.
type Collector struct {
	stats runtime.StatsReporter
}

// New returns the collector of r's instances.
func New(r runtime.StatsReporter) *Collector { return &Collector{stats: r} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- instancesDesc
	ch <- queuedDesc
	ch <- memoryKillsDesc
	ch <- restartsDesc
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.stats.InstanceStats() {
		ns, fn := s.Key.Namespace, s.Key.Name
		ch <- prometheus.MustNewConstMetric(instancesDesc, prometheus.GaugeValue, float64(s.Starting), ns, fn, "starting")
		ch <- prometheus.MustNewConstMetric(instancesDesc, prometheus.GaugeValue, float64(s.Idle), ns, fn, "idle")
		ch <- prometheus.MustNewConstMetric(instancesDesc, prometheus.GaugeValue, float64(s.Busy), ns, fn, "busy")
		ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(s.Queued), ns, fn)
		ch <- prometheus.MustNewConstMetric(memoryKillsDesc, prometheus.CounterValue, float64(s.MemoryKills), ns, fn)
		ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(s.Restarts), ns, fn)
	}
}
