package heapfloor_test

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/heapfloor"
)

// gogc returns the GC percent in force.
func gogc() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// collectUntil collects until ok holds (the adjustment runs on the
// finalizer goroutine, after a collection) or fails t after a while.
func collectUntil(t *testing.T, what string, ok func(uint64) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		runtime.GC()
		if ok(gogc()) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: GOGC stayed %d", what, gogc())
}

// TestFloor: while the live heap is small, collections wait for the floor's
// worth of allocation; once it is larger than the floor, Go's default
// applies; Stop restores the default.
func TestFloor(t *testing.T) {
	const floor = 64 << 20
	f := heapfloor.Start(floor)
	defer f.Stop()
	// The test binary's live heap is a few MB: far below the floor.
	collectUntil(t, "small heap", func(p uint64) bool { return p > 1000 })

	held := make([]byte, 2*floor) // live, and larger than the floor
	collectUntil(t, "large heap", func(p uint64) bool { return p == 100 })
	runtime.KeepAlive(held)

	held = nil
	collectUntil(t, "small again", func(p uint64) bool { return p > 1000 })
	f.Stop()
	if p := gogc(); p != 100 {
		t.Errorf("after Stop: GOGC %d, want 100", p)
	}
}
