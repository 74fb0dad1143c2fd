// Package heapfloor keeps the garbage collector from running more often than
// a small heap needs.
//
// Go collects each time the heap grows by GOGC percent of what the last
// collection left live (100: it doubles), with a floor of 4 MB. The server's
// live heap is a few MB while /fn allocates about 3 KB per request: at
// 15,000-18,000 requests a second it collected 12-16 times a second, and each
// collection stops the world, scans every goroutine's stack and takes a
// quarter of the scheduler's threads for its marking. A Floor raises GOGC
// after each collection so that the next one comes only once floor bytes
// more were allocated, and keeps GOGC at 100 once the live heap is floor or
// more: a large server's memory is what Go's default makes it, a small one
// holds up to floor bytes more.
package heapfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// defaultPercent is GOGC's default, and the least a Floor sets.
const defaultPercent = 100

// Floor adjusts GOGC after every collection until Stop.
type Floor struct {
	floor uint64

	mu      sync.Mutex
	stopped bool
	live    []metrics.Sample
}

// Start starts a Floor of floor bytes. Callers start none where the user
// set GOGC: a Floor overrides it.
func Start(floor uint64) *Floor {
	f := &Floor{floor: floor, live: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	f.arm()
	return f
}

// Stop stops adjusting and restores Go's default.
func (f *Floor) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	debug.SetGCPercent(defaultPercent)
}

// sentinel is garbage as soon as it is made: its finalizer runs after the
// next collection.
type sentinel struct{ f *Floor }

// arm makes the next collection call adjust.
func (f *Floor) arm() {
	runtime.SetFinalizer(&sentinel{f}, func(s *sentinel) {
		if s.f.adjust() {
			s.f.arm()
		}
	})
}

// adjust sets GOGC so that the next collection's goal is the live heap
// plus the floor, or twice the live heap when that is more; false once
// stopped.
func (f *Floor) adjust() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	metrics.Read(f.live)
	if live := f.live[0].Value.Uint64(); live > 0 {
		debug.SetGCPercent(int(max(defaultPercent, f.floor*100/live)))
	}
	return true
}
