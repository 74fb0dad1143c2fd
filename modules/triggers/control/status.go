package control

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"sless.kube5s.ru/sless/internal/keylock"
	"sless.kube5s.ru/sless/modules/triggers"
)

// flushInterval is how often counters of busy triggers reach the store.
const flushInterval = 500 * time.Millisecond

// StatusKeeper is the one writer of triggers' status: the reconciler sets
// phases, runners report events (one per run or message, too many to write
// each), and the keeper folds both into the status and writes what changed
// every flushInterval. It implements triggers.Reporter.
type StatusKeeper struct {
	store triggers.Store
	log   *slog.Logger

	mu       sync.Mutex
	statuses map[triggers.Key]*triggers.Status
	dirty    map[triggers.Key]bool
	// specs are what the metrics label each trigger with; inflight
	// counts its invocations that fired and have not ended (in this
	// process).
	specs    map[triggers.Key]labels
	inflight map[triggers.Key]int

	// writing serializes the store writes of each trigger's status, and a
	// write takes its snapshot under it: a flush that snapshotted before a
	// phase change can then not write its older status over the new phase.
	writing keylock.Map[triggers.Key]

	base context.Context // for flushes; from Start, never cancelled
	stop chan struct{}
	done chan struct{}
}

// NewStatusKeeper returns a keeper writing to store.
func NewStatusKeeper(store triggers.Store, log *slog.Logger) *StatusKeeper {
	return &StatusKeeper{store: store, log: log, statuses: map[triggers.Key]*triggers.Status{}, dirty: map[triggers.Key]bool{},
		specs: map[triggers.Key]labels{}, inflight: map[triggers.Key]int{},
		stop: make(chan struct{}), done: make(chan struct{})}
}

// Start starts the flush loop.
func (k *StatusKeeper) Start(ctx context.Context) error {
	k.base = context.WithoutCancel(ctx)
	go k.loop()
	return nil
}

// Stop writes what is pending and stops the loop.
func (k *StatusKeeper) Stop(ctx context.Context) error {
	close(k.stop)
	select {
	case <-k.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	k.flush(ctx)
	return nil
}

func (k *StatusKeeper) loop() {
	defer close(k.done)
	tick := time.NewTicker(flushInterval)
	defer tick.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(k.base, 10*time.Second)
			k.flush(ctx)
			cancel()
		}
	}
}

// track makes the keeper hold the status of t, as stored.
func (k *StatusKeeper) track(t *triggers.Trigger) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.statuses[t.Key()]; !ok {
		st := t.Status
		k.statuses[t.Key()] = &st
	}
	k.specs[t.Key()] = labels{kind: t.Type, function: t.Function}
}

// forget drops a deleted trigger.
func (k *StatusKeeper) forget(key triggers.Key) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.statuses, key)
	delete(k.dirty, key)
	delete(k.specs, key)
	delete(k.inflight, key)
}

// setPhase records the reconciler's verdict and writes it at once, so that
// the API shows it when the change it answers is visible.
func (k *StatusKeeper) setPhase(ctx context.Context, t *triggers.Trigger, phase, msg string) error {
	k.track(t)
	defer k.writing.Lock(t.Key())()
	k.mu.Lock()
	st := k.statuses[t.Key()]
	st.Phase, st.Message, st.ObservedGeneration = phase, msg, t.Generation
	if phase != triggers.PhaseActive {
		st.NextFireAt = nil
	}
	snapshot := *st
	delete(k.dirty, t.Key())
	k.mu.Unlock()
	err := k.store.UpdateStatus(ctx, t.Key(), snapshot)
	if errors.Is(err, triggers.ErrNotFound) {
		return nil
	}
	return err
}

// Report implements triggers.Reporter.
func (k *StatusKeeper) Report(key triggers.Key, ev triggers.Event) {
	k.mu.Lock()
	defer k.mu.Unlock()
	st, ok := k.statuses[key]
	if !ok {
		return // removed meanwhile
	}
	at := ev.At.UTC()
	switch ev.Kind {
	case triggers.EventFired:
		st.Fired++
		st.LastFiredAt = &at
		k.inflight[key]++
	case triggers.EventSucceeded:
		st.Succeeded++
		k.ended(key)
	case triggers.EventFailed:
		st.Failed++
		k.ended(key)
		st.LastError, st.LastErrorAt = ev.Message, &at
	case triggers.EventSkipped:
		st.Skipped++
		st.LastError, st.LastErrorAt = ev.Message, &at
	case triggers.EventDeadLettered:
		st.DeadLettered++
		st.LastError, st.LastErrorAt = ev.Message, &at
	case triggers.EventError:
		st.Phase, st.Message = triggers.PhaseError, ev.Message
		st.LastError, st.LastErrorAt = ev.Message, &at
	case triggers.EventHealthy:
		if st.Phase == triggers.PhaseError {
			st.Phase, st.Message = triggers.PhaseActive, ""
		}
	case triggers.EventScheduled:
		next := ev.Next.UTC()
		st.NextFireAt = &next
	}
	k.dirty[key] = true
}

// ended counts the end of one of key's invocations in flight.
func (k *StatusKeeper) ended(key triggers.Key) {
	if k.inflight[key] > 0 {
		k.inflight[key]--
	}
}

// flush writes the statuses that changed since the last flush.
func (k *StatusKeeper) flush(ctx context.Context) {
	k.mu.Lock()
	keys := slices.Collect(maps.Keys(k.dirty))
	clear(k.dirty)
	k.mu.Unlock()
	for _, key := range keys {
		k.flushOne(ctx, key)
	}
}

// flushOne writes key's status as it is now, unless it was forgotten.
func (k *StatusKeeper) flushOne(ctx context.Context, key triggers.Key) {
	defer k.writing.Lock(key)()
	k.mu.Lock()
	st, ok := k.statuses[key]
	var snapshot triggers.Status
	if ok {
		snapshot = *st
	}
	k.mu.Unlock()
	if !ok {
		return
	}
	if err := k.store.UpdateStatus(ctx, key, snapshot); err != nil && !errors.Is(err, triggers.ErrNotFound) {
		k.log.Error("writing a trigger's status failed", "trigger", key.String(), "error", err)
		k.mu.Lock()
		if _, ok := k.statuses[key]; ok {
			k.dirty[key] = true
		}
		k.mu.Unlock()
	}
}
