// Package buildmetrics counts builds for Prometheus: a build.Observer that
// every builder's jobs tell about each build's end.
package buildmetrics

import (
	"context"
	"errors"

	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.kube5s.ru/sless/modules/build"
)

// The results a build is counted with.
const (
	// Succeeded: a new artifact; Reused: the same code's artifact was
	// there already.
	Succeeded = "succeeded"
	Reused    = "reused"
	// Failed: the code's fault (build.Error); Error: the server's.
	Failed = "failed"
	Error  = "error"
	// Cancelled: superseded by newer code, or its function deleted.
	Cancelled = "cancelled"
)

// Metrics is the build.Observer that keeps the builds' series.
type Metrics struct {
	builds   *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

var _ build.Observer = (*Metrics)(nil)

// New returns the builds' series, registered on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		builds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sless_builds_total",
			Help: "Builds of a function by result: succeeded, reused (the artifact of the same code existed), failed (the code's fault), error (the server's), cancelled."},
			[]string{"namespace", "function", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sless_build_duration_seconds",
			Help:    "Duration of builds by runtime and result.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}},
			[]string{"runtime", "result"}),
	}
	for _, c := range []prometheus.Collector{m.builds, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Result names how a build ended.
func Result(res build.Result, err error) string {
	switch {
	case errors.Is(err, context.Canceled):
		return Cancelled
	case err != nil:
		if _, ok := build.AsError(err); ok {
			return Failed
		}
		return Error
	case res.Reused:
		return Reused
	}
	return Succeeded
}

// BuildEnded implements build.Observer.
func (m *Metrics) BuildEnded(req build.Request, _ time.Time, took time.Duration, res build.Result, err error) {
	result := Result(res, err)
	m.builds.WithLabelValues(req.Namespace, req.Function, result).Inc()
	m.duration.WithLabelValues(req.Runtime, result).Observe(took.Seconds())
}

// Forget implements build.Observer.
func (m *Metrics) Forget(namespace, function string) {
	m.builds.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "function": function})
}
