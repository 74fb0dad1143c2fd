package ledger

import (
	"errors"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.kube5s.ru/sless/modules/invoke/ledger/journal"
)

// metrics are the ledger's Prometheus series; a nil *metrics records
// nothing.
type metrics struct {
	held prometheus.Counter
	// batch and flush are the sizes and durations of the database writes
	// that succeeded, written counts their records.
	batch, flush prometheus.Histogram
	written      prometheus.Counter
}

func newMetrics(l *Ledger, reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{held: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sless_ledger_journal_refused_records_total",
		Help: "Invocation records the journal could not write (a full disk), kept in memory instead.",
	}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sless_ledger_batch_records",
			Help:    "Invocation records per batch written to the database.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 7),
		}),
		flush: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sless_ledger_flush_seconds",
			Help:    "Duration of the database writes of invocation records that succeeded, one batch each.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sless_ledger_written_records_total",
			Help: "Invocation records written to the database (a record written again after a crash counts again).",
		}),
	}
	reg.MustRegister(m.held, m.batch, m.flush, m.written,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sless_ledger_held_records",
			Help: "Invocation records the journal refused that wait in memory for the journal or the database.",
		}, func() float64 { held, _ := l.heldAndLost(); return float64(held) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sless_ledger_lost_records_total",
			Help: "Invocation records lost: neither the journal nor memory could keep them (it stays 0 unless the disk is full for long).",
		}, func() float64 { _, lost := l.heldAndLost(); return float64(lost) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sless_ledger_behind_bytes",
			Help: "Bytes of invocation records in the journal not yet written to the database.",
		}, func() float64 { return float64(l.behind()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sless_ledger_journal_bytes",
			Help: "Size of the invocation journal on disk.",
		}, func() float64 { return float64(l.j.Bytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sless_ledger_failing_seconds",
			Help: "How long the database has refused invocation records; 0 while writes succeed.",
		}, func() float64 { return l.failingFor().Seconds() }),
	)
	return m
}

// wrote counts a batch of n records written in took.
func (m *metrics) wrote(n int, took time.Duration) {
	if m != nil {
		m.batch.Observe(float64(n))
		m.flush.Observe(took.Seconds())
		m.written.Add(float64(n))
	}
}

func (m *metrics) refusedByJournal() {
	if m != nil {
		m.held.Inc()
	}
}

// journalProblem says in a client's terms why the journal refused a write.
func journalProblem(err error) string {
	switch {
	case errors.Is(err, journal.ErrFull):
		return "it reached its size limit while the database is behind"
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "the disk is full"
	}
	return "a write to disk failed"
}
