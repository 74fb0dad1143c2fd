// Package procs sizes the Go scheduler (GOMAXPROCS) to the work the server
// does: few threads while it serves /fn lightly, every CPU while its control
// plane works or while many invocations are in flight.
//
// The two want opposite things on a small machine. /fn waits on instances
// that need the CPUs too, and with one thread the server hands requests
// between threads less often: on a 2-CPU machine it adds less latency and
// spends less CPU per request. A deploy is the opposite: API writes, blob
// and build fsyncs. With one thread, each blocking system call has its
// thread's P taken away by the runtime's monitor and handed to another
// thread, which keeps the monitor polling every 20 µs (a fifth of the
// server's CPU during deploys), and the server's own work cannot use the
// second CPU; with every CPU, 3,000 deploys took 12 s instead of 17
// (bench/README.md).
//
// Many invocations in flight at once turn the one thread into a queue: each
// request's share of the server's work waits behind the others', and behind
// the ledger's batch inserts and the garbage collector. On a 2-CPU machine
// at 32 connections on one hello function, every CPU served 7-16% more
// requests per second at half the p99, for the same CPU per request; at 8
// connections and fewer one thread did as well for less CPU (bench/README.md).
// A Crowd raises the Governor while many pieces of work are in flight.
package procs

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Governor raises GOMAXPROCS from quiet to busy while work is in flight, and
// lowers it again once none has been for settle. It is safe for concurrent
// use; the scheduler is resized only when the state changes, which stops
// the world for a few microseconds.
type Governor struct {
	quiet, busy int
	settle      time.Duration

	mu       sync.Mutex
	inflight int
	raised   bool
	lower    *time.Timer // armed while nothing is in flight and raised
	// ends counts the times nothing was left in flight; a lowering armed
	// at one of them applies only if it is still the last.
	ends uint64
}

// New returns a Governor between quiet and busy procs (busy > quiet > 0).
// The caller sets GOMAXPROCS to quiet first.
func New(quiet, busy int, settle time.Duration) *Governor {
	return &Governor{quiet: quiet, busy: busy, settle: settle}
}

// Begin marks one piece of work in flight, raising GOMAXPROCS to busy, and
// returns its end, which must be called once.
func (g *Governor) Begin() (end func()) {
	g.mu.Lock()
	g.inflight++
	if g.lower != nil {
		g.lower.Stop()
		g.lower = nil
	}
	if !g.raised {
		g.raised = true
		runtime.GOMAXPROCS(g.busy)
	}
	g.mu.Unlock()
	return g.end
}

func (g *Governor) end() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight--
	if g.inflight == 0 {
		g.ends++
		at := g.ends
		g.lower = time.AfterFunc(g.settle, func() { g.settled(at) })
	}
}

// settled lowers GOMAXPROCS unless work began since the end numbered at.
func (g *Governor) settled(at uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ends != at || g.inflight > 0 {
		return
	}
	g.lower = nil
	g.raised = false
	runtime.GOMAXPROCS(g.quiet)
}

// Crowd holds its Governor raised while many pieces of work are in flight:
// from when raiseAt are until fewer than lowerAt are (the gap keeps a count
// that hovers around one threshold from resizing the scheduler back and
// forth). Begin and End are safe for concurrent use and cost two atomic
// adds while the count crosses no threshold.
type Crowd struct {
	g                *Governor
	raiseAt, lowerAt int64
	inflight         atomic.Int64

	mu sync.Mutex
	// end ends the Governor's work begun by the crowd; nil while the crowd
	// does not hold it raised.
	end func()
}

// Crowd returns a Crowd of g (raiseAt > lowerAt > 0).
func (g *Governor) Crowd(raiseAt, lowerAt int) *Crowd {
	return &Crowd{g: g, raiseAt: int64(raiseAt), lowerAt: int64(lowerAt)}
}

// Begin counts one piece of work in flight.
func (c *Crowd) Begin() {
	if c.inflight.Add(1) == c.raiseAt {
		c.update()
	}
}

// End counts one piece of work ended.
func (c *Crowd) End() {
	if c.inflight.Add(-1) == c.lowerAt-1 {
		c.update()
	}
}

// update holds or lets go of the Governor as the count now requires: a
// crossing that raced with another is decided by the count the last of
// them sees.
func (c *Crowd) update() {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.inflight.Load()
	switch {
	case c.end == nil && n >= c.raiseAt:
		c.end = c.g.Begin()
	case c.end != nil && n < c.lowerAt:
		c.end()
		c.end = nil
	}
}
