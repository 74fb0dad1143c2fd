package control

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/trstoretest"
)

// TestStatusKeeperMetrics: the series of a cron trigger follow its events
// and go when the trigger is forgotten; an http trigger has none.
func TestStatusKeeperMetrics(t *testing.T) {
	ctx := context.Background()
	store := trstoretest.NewTriggers()
	cron, err := store.Create(ctx, trigger("nightly", triggers.TypeCron))
	if err != nil {
		t.Fatal(err)
	}
	web, err := store.Create(ctx, trigger("web", triggers.TypeHTTP))
	if err != nil {
		t.Fatal(err)
	}
	cron.Status = triggers.Status{Phase: triggers.PhaseActive, Fired: 5, Succeeded: 4, Failed: 1}
	k := NewStatusKeeper(store, discard)
	k.track(cron)
	k.track(web)
	now := time.Unix(1_800_000_000, 0)
	for _, kind := range []string{triggers.EventFired, triggers.EventFired, triggers.EventSucceeded, triggers.EventSkipped} {
		k.Report(cron.Key(), triggers.Event{Kind: kind, At: now})
	}
	k.Report(cron.Key(), triggers.Event{Kind: triggers.EventScheduled, At: now, Next: now.Add(90 * time.Second)})
	l := `{function="` + cron.Function + `",namespace="` + cron.Namespace + `",trigger="nightly",trigger_kind="cron"`
	want := map[string]float64{
		`sless_trigger_events_total` + l + `,event="dead_lettered"}`: 0,
		`sless_trigger_events_total` + l + `,event="failed"}`:        1,
		`sless_trigger_events_total` + l + `,event="fired"}`:         7,
		`sless_trigger_events_total` + l + `,event="skipped"}`:       1,
		`sless_trigger_events_total` + l + `,event="succeeded"}`:     5,
		`sless_trigger_up` + l + `}`:                                 1,
		`sless_trigger_inflight` + l + `}`:                           1,
		`sless_trigger_next_fire_timestamp_seconds` + l + `}`:        1_800_000_090,
	}
	if diff := cmp.Diff(want, collect(t, k)); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}
	k.forget(cron.Key())
	if n := testutil.CollectAndCount(k); n != 0 {
		t.Errorf("after forget: %d series, want 0", n)
	}
}

// collect returns c's series by name and labels (the labels in the order
// of their description, event last).
func collect(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 100)
	c.Collect(ch)
	close(ch)
	out := map[string]float64{}
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		desc := m.Desc().String()
		name := desc[strings.Index(desc, `fqName: "`)+9:]
		name = name[:strings.Index(name, `"`)]
		var labels []string
		for _, lp := range d.GetLabel() {
			if lp.GetName() != "event" {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
		}
		for _, lp := range d.GetLabel() {
			if lp.GetName() == "event" {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
		}
		v := d.GetGauge().GetValue()
		if d.Counter != nil {
			v = d.GetCounter().GetValue()
		}
		out[name+"{"+strings.Join(labels, ",")+"}"] = v
	}
	return out
}
