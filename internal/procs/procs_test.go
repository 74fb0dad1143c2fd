package procs_test

import (
	"runtime"
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
