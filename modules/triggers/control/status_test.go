package control

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/trstoretest"
)

// flakyStatus is a trigger store whose status writes fail while fail is
// set.
type flakyStatus struct {
	triggers.Store
	fail atomic.Bool
}

func (f *flakyStatus) UpdateStatus(ctx context.Context, k triggers.Key, st triggers.Status) error {
	if f.fail.Load() {
		return errors.New("database is down")
	}
	return f.Store.UpdateStatus(ctx, k, st)
}

// TestStatusKeeper folds runners' events into the status, one row per
// event in, the status written by the next flush out.
func TestStatusKeeper(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("MSK", 3*3600))
	utc := at.UTC()
	next := utc.Add(time.Hour)
	tests := []struct {
		name   string
		before triggers.Status
		events []triggers.Event
		want   triggers.Status
	}{
		{"fired and succeeded", triggers.Status{Phase: triggers.PhaseActive},
			[]triggers.Event{{Kind: triggers.EventFired, At: at}, {Kind: triggers.EventSucceeded, At: at}},
			triggers.Status{Phase: triggers.PhaseActive, Fired: 1, Succeeded: 1, LastFiredAt: &utc}},
		{"failed, skipped and dead-lettered keep the last reason", triggers.Status{Phase: triggers.PhaseActive, Fired: 7},
			[]triggers.Event{{Kind: triggers.EventFailed, At: at, Message: "500"}, {Kind: triggers.EventSkipped, At: at, Message: "overlap"},
				{Kind: triggers.EventDeadLettered, At: at, Message: "retries exhausted"}},
			triggers.Status{Phase: triggers.PhaseActive, Fired: 7, Failed: 1, Skipped: 1, DeadLettered: 1,
				LastError: "retries exhausted", LastErrorAt: &utc}},
		{"an error and the recovery", triggers.Status{Phase: triggers.PhaseActive},
			[]triggers.Event{{Kind: triggers.EventError, At: at, Message: "connection refused"}, {Kind: triggers.EventHealthy, At: at}},
			triggers.Status{Phase: triggers.PhaseActive, LastError: "connection refused", LastErrorAt: &utc}},
		{"an error stays until the recovery", triggers.Status{Phase: triggers.PhaseActive},
			[]triggers.Event{{Kind: triggers.EventError, At: at, Message: "connection refused"}},
			triggers.Status{Phase: triggers.PhaseError, Message: "connection refused", LastError: "connection refused", LastErrorAt: &utc}},
		{"healthy does not revive a disabled trigger", triggers.Status{Phase: triggers.PhaseDisabled},
			[]triggers.Event{{Kind: triggers.EventHealthy, At: at}},
			triggers.Status{Phase: triggers.PhaseDisabled}},
		{"scheduled", triggers.Status{Phase: triggers.PhaseActive},
			[]triggers.Event{{Kind: triggers.EventScheduled, At: at, Next: next.In(at.Location())}},
			triggers.Status{Phase: triggers.PhaseActive, NextFireAt: &next}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := trstoretest.NewTriggers()
			tr, err := store.Create(ctx, trigger("t", triggers.TypeCron))
			if err != nil {
				t.Fatal(err)
			}
			if err := store.UpdateStatus(ctx, tr.Key(), tc.before); err != nil {
				t.Fatal(err)
			}
			tr.Status = tc.before
			k := NewStatusKeeper(store, discard)
			k.track(tr)
			for _, ev := range tc.events {
				k.Report(tr.Key(), ev)
			}
			k.flush(ctx)
			got, err := store.Get(ctx, tr.Key())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Status); diff != "" {
				t.Errorf("status after the flush (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStatusKeeperRetriesAndForgets(t *testing.T) {
	ctx := context.Background()
	mem := trstoretest.NewTriggers()
	store := &flakyStatus{Store: mem}
	tr, err := mem.Create(ctx, trigger("t", triggers.TypeCron))
	if err != nil {
		t.Fatal(err)
	}
	k := NewStatusKeeper(store, discard)
	k.track(tr)
	k.Report(tr.Key(), triggers.Event{Kind: triggers.EventFired, At: time.Now()})
	store.fail.Store(true)
	k.flush(ctx)
	store.fail.Store(false)
	k.flush(ctx)
	if got, err := mem.Get(ctx, tr.Key()); err != nil || got.Status.Fired != 1 {
		t.Errorf("after a failed and a good flush: fired %d, %v; want 1", got.Status.Fired, err)
	}
	// Nothing is written again once clean, and a forgotten trigger's late
	// events are dropped.
	if err := mem.UpdateStatus(ctx, tr.Key(), triggers.Status{Phase: "marker"}); err != nil {
		t.Fatal(err)
	}
	k.flush(ctx)
	k.forget(tr.Key())
	k.Report(tr.Key(), triggers.Event{Kind: triggers.EventFired, At: time.Now()})
	k.flush(ctx)
	if got, _ := mem.Get(ctx, tr.Key()); got.Status.Phase != "marker" {
		t.Errorf("status %+v; want the marker untouched", got.Status)
	}
}

// blockingStatus is a trigger store whose status writes wait, while block
// is set, until release is closed, saying on blocked that one waits.
type blockingStatus struct {
	triggers.Store
	block   atomic.Bool
	blocked chan struct{}
	release chan struct{}
}

func (b *blockingStatus) UpdateStatus(ctx context.Context, k triggers.Key, st triggers.Status) error {
	if b.block.CompareAndSwap(true, false) {
		close(b.blocked)
		<-b.release
	}
	return b.Store.UpdateStatus(ctx, k, st)
}

// TestPhaseOutlivesASlowerFlush: a flush that took its snapshot before the
// reconciler disabled the trigger, and writes it after, must not bring the
// old phase back. It did, and the CLI waited in vain for Disabled (seen in
// e2e/TestObservability: the last cron event before the disable made the
// status dirty, and nothing made it dirty again).
func TestPhaseOutlivesASlowerFlush(t *testing.T) {
	ctx := context.Background()
	mem := trstoretest.NewTriggers()
	store := &blockingStatus{Store: mem, blocked: make(chan struct{}), release: make(chan struct{})}
	tr, err := mem.Create(ctx, trigger("t", triggers.TypeCron))
	if err != nil {
		t.Fatal(err)
	}
	k := NewStatusKeeper(store, discard)
	if err := k.setPhase(ctx, tr, triggers.PhaseActive, ""); err != nil {
		t.Fatal(err)
	}
	k.Report(tr.Key(), triggers.Event{Kind: triggers.EventFired, At: time.Now()})
	store.block.Store(true)
	flushed := make(chan struct{})
	go func() { k.flush(ctx); close(flushed) }()
	<-store.blocked // the flush holds its snapshot: Active
	disabled := make(chan error, 1)
	go func() { disabled <- k.setPhase(ctx, tr, triggers.PhaseDisabled, "") }()
	select {
	case err := <-disabled: // the unordered keeper writes at once
		disabled <- err
	case <-time.After(200 * time.Millisecond):
	}
	close(store.release)
	<-flushed
	if err := <-disabled; err != nil {
		t.Fatal(err)
	}
	got, err := mem.Get(ctx, tr.Key())
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != triggers.PhaseDisabled || got.Status.Fired != 1 {
		t.Errorf("status %+v after the disable and a slower flush; want Disabled with the run counted", got.Status)
	}
}
