package procs_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/procs"
)

// waitProcs waits up to a few seconds for GOMAXPROCS to be want.
func waitProcs(t *testing.T, want int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.GOMAXPROCS(0) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: GOMAXPROCS %d; want %d", what, runtime.GOMAXPROCS(0), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestGovernorRaisesWhileWorkIsInFlightAndLowersOnceSettled(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	const settle = 50 * time.Millisecond
	g := procs.New(1, 3, settle)

	endA := g.Begin()
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("GOMAXPROCS with work in flight: %d; want 3", got)
	}
	endB := g.Begin()
	endA()
	time.Sleep(2 * settle)
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("GOMAXPROCS with one of two pieces of work ended: %d; want 3", got)
	}
	ended := time.Now()
	endB()
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("GOMAXPROCS right after the last work ended: %d; want 3 until it settles", got)
	}
	waitProcs(t, 1, "after the last work ended")
	if took := time.Since(ended); took < settle {
		t.Errorf("lowered %v after the last work ended; want at least %v", took, settle)
	}

	// Work that begins before the end settles keeps the procs raised.
	end := g.Begin()
	end()
	time.Sleep(settle / 2)
	end = g.Begin()
	time.Sleep(2 * settle)
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("GOMAXPROCS with work begun while settling: %d; want 3", got)
	}
	end()
	waitProcs(t, 1, "after that work ended")
}

func TestCrowdRaisesWhileManyAreInFlight(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	const settle = 20 * time.Millisecond
	c := procs.New(1, 3, settle).Crowd(4, 2)

	for range 3 {
		c.Begin()
	}
	time.Sleep(2 * settle)
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("GOMAXPROCS with 3 in flight: %d; want 1 below the crowd", got)
	}
	c.Begin()
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("GOMAXPROCS with 4 in flight: %d; want 3", got)
	}
	// Between the thresholds the crowd holds on.
	c.End()
	c.End()
	time.Sleep(2 * settle)
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("GOMAXPROCS with 2 of 4 left in flight: %d; want 3 until fewer than 2 are", got)
	}
	c.End()
	waitProcs(t, 1, "with 1 left in flight")
	// Back between the thresholds from below: not raised.
	c.Begin()
	c.Begin()
	time.Sleep(2 * settle)
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("GOMAXPROCS with 3 in flight again: %d; want 1", got)
	}
}

func TestCrowdFromManyGoroutinesEndsLowered(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	c := procs.New(1, 3, time.Millisecond).Crowd(4, 2)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 200 {
				c.Begin()
				runtime.Gosched()
				c.End()
			}
		})
	}
	wg.Wait()
	waitProcs(t, 1, "after every piece of work ended")
}
