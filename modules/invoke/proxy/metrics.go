package proxy

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/meta"
)

// outcome is how an invocation ended, as its metrics count it: the class of
// the function's own status, or the platform's answer in its place.
type outcome uint8

// The outcomes; outcomeNone means the function answered (its status class
// applies).
const (
	outcomeNone outcome = iota
	outcome2xx
	outcome3xx
	outcome4xx
	outcome5xx
	// The platform's answers.
	outcomeTimeout     // 504
	outcomeCrash       // 502: the instance crashed or failed to start, or its response could not be passed on
	outcomeTooLarge    // 413
	outcomeOverloaded  // 503 at capacity
	outcomeUnavailable // 503: the function is not ready
	outcomeCancelled   // 499
	outcomeBadRequest  // 400: the request body could not be read
	outcomeError       // 500: an internal error
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"", "2xx", "3xx", "4xx", "5xx",
	"timeout", "crash", "too_large", "overloaded", "unavailable", "cancelled", "bad_request", "error"}

// platformOutcome is the outcome of the platform's own answer with code.
func platformOutcome(code int) outcome {
	switch code {
	case http.StatusGatewayTimeout:
		return outcomeTimeout
	case http.StatusBadGateway:
		return outcomeCrash
	case http.StatusRequestEntityTooLarge:
		return outcomeTooLarge
	case http.StatusServiceUnavailable:
		return outcomeUnavailable
	case 499:
		return outcomeCancelled
	case http.StatusBadRequest:
		return outcomeBadRequest
	}
	return outcomeError
}

// statusOutcome is the outcome of the function's own status code.
func statusOutcome(code int) outcome {
	switch {
	case code < 300:
		return outcome2xx
	case code < 400:
		return outcome3xx
	case code < 500:
		return outcome4xx
	}
	return outcome5xx
}

// The trigger kinds counted apart; any other kind counts as "other".
var kindNames = [...]string{invoke.KindHTTP, invoke.KindCron, invoke.KindRabbitMQ, invoke.KindJob, invoke.KindCLI, "other"}

func kindIndex(kind string) int {
	switch kind {
	case invoke.KindHTTP:
		return 0
	case invoke.KindCron:
		return 1
	case invoke.KindRabbitMQ:
		return 2
	case invoke.KindJob:
		return 3
	case invoke.KindCLI:
		return 4
	}
	return len(kindNames) - 1
}

// durationBuckets span a fast handler's milliseconds to the longest
// timeout (900 s), in seconds.
var durationBuckets = [...]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900}

var (
	invocationsDesc = prometheus.NewDesc("sless_invocations_total",
		"Invocations of a function by trigger kind and outcome: the class of the function's status (2xx..5xx) or the platform's answer "+
			"(timeout 504, crash 502, too_large 413, overloaded 503 at capacity, unavailable 503 not ready, cancelled 499, bad_request 400, error 500).",
		[]string{"namespace", "function", "trigger_kind", "outcome"}, nil)
	coldStartsDesc = prometheus.NewDesc("sless_invocation_cold_starts_total",
		"Invocations of a function that started an instance (cold starts); the others found one warm.",
		[]string{"namespace", "function"}, nil)
	notFoundDesc = prometheus.NewDesc("sless_invocations_not_found_total",
		"Invocations refused with 404 because the function does not exist (not labelled: the names are the callers').", nil, nil)
)

// fnSeries are one function's series. Invocations add to them without
// locks or allocations: counters are atomics, histograms prometheus's.
type fnSeries struct {
	calls [len(kindNames)][numOutcomes]atomic.Uint64
	colds atomic.Uint64
	// duration is the whole invocation; queue, cold and handler its
	// Server-Timing phases.
	duration, queue, cold, handler prometheus.Histogram
	// recent is the last hour, for the stats of the API.
	recent window
}

func newFnSeries(k meta.Key) *fnSeries {
	labels := prometheus.Labels{"namespace": k.Namespace, "function": k.Name}
	phase := func(p string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sless_invocation_phase_seconds",
			Help:        "Phases of a function's invocations, as in Server-Timing: queue (waiting for capacity), cold (starting an instance, cold starts only), handler (the handler's own time).",
			ConstLabels: prometheus.Labels{"namespace": k.Namespace, "function": k.Name, "phase": p}, Buckets: durationBuckets[:]})
	}
	return &fnSeries{
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sless_invocation_duration_seconds",
			Help:        "Duration of a function's invocations as the platform saw them, from the request to the end of the response.",
			ConstLabels: labels, Buckets: durationBuckets[:]}),
		queue: phase("queue"), cold: phase("cold"), handler: phase("handler"),
	}
}

// metrics are the proxy's series, a prometheus.Collector. A function's
// series are made on its first invocation and dropped when the executor
// undeploys it, so that only functions that exist have series.
type metrics struct {
	mu  sync.RWMutex
	fns map[meta.Key]*fnSeries

	notFound atomic.Uint64
}

func newMetrics() *metrics { return &metrics{fns: map[meta.Key]*fnSeries{}} }

// lookup returns k's series, nil when it has none yet: an invocation takes
// them before it runs, so that one in flight when its function is deleted
// counts into the dropped series instead of making them again.
func (m *metrics) lookup(k meta.Key) *fnSeries {
	m.mu.RLock()
	fs := m.fns[k]
	m.mu.RUnlock()
	return fs
}

// create returns k's series, making them when missing.
func (m *metrics) create(k meta.Key) *fnSeries {
	m.mu.Lock()
	defer m.mu.Unlock()
	fs, ok := m.fns[k]
	if !ok {
		fs = newFnSeries(k)
		m.fns[k] = fs
	}
	return fs
}

// forget drops k's series.
func (m *metrics) forget(k meta.Key) {
	m.mu.Lock()
	delete(m.fns, k)
	m.mu.Unlock()
}

// observe counts the invocation c, which rec records (StatusCode 0: not
// recorded) and which took d; fs are its function's series as lookup found
// them before it ran.
func (m *metrics) observe(fs *fnSeries, c *call, rec *invoke.Record, d time.Duration) {
	o := c.refusal
	if rec.StatusCode == 0 && o != outcomeOverloaded {
		// An unknown function: no series of its own.
		m.notFound.Add(1)
		return
	}
	if fs == nil {
		fs = m.create(meta.Key{Namespace: c.ns, Name: c.name})
	}
	if o == outcomeNone {
		o = statusOutcome(rec.StatusCode)
	}
	fs.calls[kindIndex(c.kind)][o].Add(1)
	fs.recent.observe(rec.StartedAt.Add(d), o, d, c.leased && rec.ColdStart, o != outcomeOverloaded)
	if o == outcomeOverloaded {
		return // it never ran, and a summary counts it in the ledger
	}
	fs.duration.Observe(d.Seconds())
	if !c.leased {
		return
	}
	fs.queue.Observe(rec.QueueMS / 1000)
	if rec.ColdStart {
		fs.colds.Add(1)
		fs.cold.Observe(rec.ColdStartMS / 1000)
	}
	if c.refusal == outcomeNone {
		fs.handler.Observe(rec.HandlerMS / 1000)
	}
}

// Describe implements prometheus.Collector. It describes nothing: the
// histograms' descriptions carry each function's labels, so the collector
// is unchecked.
func (m *metrics) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(notFoundDesc, prometheus.CounterValue, float64(m.notFound.Load()))
	m.mu.RLock()
	defer m.mu.RUnlock()
	for k, fs := range m.fns {
		for kind := range fs.calls {
			for o := outcome2xx; o < numOutcomes; o++ {
				if n := fs.calls[kind][o].Load(); n > 0 {
					ch <- prometheus.MustNewConstMetric(invocationsDesc, prometheus.CounterValue, float64(n),
						k.Namespace, k.Name, kindNames[kind], outcomeNames[o])
				}
			}
		}
		ch <- prometheus.MustNewConstMetric(coldStartsDesc, prometheus.CounterValue, float64(fs.colds.Load()), k.Namespace, k.Name)
		fs.duration.Collect(ch)
		fs.queue.Collect(ch)
		fs.cold.Collect(ch)
		fs.handler.Collect(ch)
	}
}
