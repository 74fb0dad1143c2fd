package ledger

import (
	"errors"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"sless.kube5s.ru/sless/modules/invoke/ledger/journal"
)

// metrics are the ledger's Prometheus series; a nil *metrics records
// nothing.
type metrics struct {
	held prometheus.Counter
}

func newMetrics(l *Ledger, reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{held: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sless_ledger_journal_refused_records_total",
		Help: "Invocation records the journal could not write (a full disk), kept in memory instead.",
	})}
	reg.MustRegister(m.held,
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
