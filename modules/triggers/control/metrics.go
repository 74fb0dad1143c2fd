package control

import (
	"github.com/prometheus/client_golang/prometheus"

	"sless.kube5s.ru/sless/modules/triggers"
)

// labels are what a trigger's series say besides its namespace and name.
type labels struct {
	kind, function string
}

var (
	triggerLabels     = []string{"namespace", "trigger", "function", "trigger_kind"}
	triggerEventsDesc = prometheus.NewDesc("sless_trigger_events_total",
		"Events of a cron or rabbitmq trigger since it was created, as in its status: fired (an invocation started), succeeded, failed, "+
			"skipped (a run that did not start), dead_lettered (a message that spent its retries).",
		append(triggerLabels, "event"), nil)
	triggerUpDesc = prometheus.NewDesc("sless_trigger_up",
		"1 while a cron or rabbitmq trigger runs (a rabbitmq trigger: its consumer is connected), 0 while it is disabled or in error.",
		triggerLabels, nil)
	triggerInflightDesc = prometheus.NewDesc("sless_trigger_inflight",
		"Invocations of a cron or rabbitmq trigger running now (for rabbitmq: messages being run).",
		triggerLabels, nil)
	triggerNextFireDesc = prometheus.NewDesc("sless_trigger_next_fire_timestamp_seconds",
		"When a cron trigger runs next, in Unix seconds.",
		triggerLabels, nil)
)

// Describe implements prometheus.Collector.
func (k *StatusKeeper) Describe(ch chan<- *prometheus.Desc) {
	ch <- triggerEventsDesc
	ch <- triggerUpDesc
	ch <- triggerInflightDesc
	ch <- triggerNextFireDesc
}

// Collect implements prometheus.Collector: the series of the cron and
// rabbitmq triggers the keeper holds, which it drops with the trigger.
func (k *StatusKeeper) Collect(ch chan<- prometheus.Metric) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, spec := range k.specs {
		if spec.kind != triggers.TypeCron && spec.kind != triggers.TypeRabbitMQ {
			continue // an http trigger has no runs of its own
		}
		st := k.statuses[key]
		lv := []string{key.Namespace, key.Name, spec.function, spec.kind}
		for _, ev := range []struct {
			name string
			n    int64
		}{{triggers.EventFired, st.Fired}, {triggers.EventSucceeded, st.Succeeded}, {triggers.EventFailed, st.Failed},
			{triggers.EventSkipped, st.Skipped}, {triggers.EventDeadLettered, st.DeadLettered}} {
			ch <- prometheus.MustNewConstMetric(triggerEventsDesc, prometheus.CounterValue, float64(ev.n), append(lv, ev.name)...)
		}
		up := 0.0
		if st.Phase == triggers.PhaseActive {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(triggerUpDesc, prometheus.GaugeValue, up, lv...)
		ch <- prometheus.MustNewConstMetric(triggerInflightDesc, prometheus.GaugeValue, float64(k.inflight[key]), lv...)
		if st.NextFireAt != nil {
			ch <- prometheus.MustNewConstMetric(triggerNextFireDesc, prometheus.GaugeValue,
				float64(st.NextFireAt.UnixMilli())/1000, lv...)
		}
	}
}
