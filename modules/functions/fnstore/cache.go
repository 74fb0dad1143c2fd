package fnstore

import (
	"maps"
	"slices"
	"sync"

	"sless.kube5s.ru/sless/modules/functions"
)

// maxCacheBytes bounds what the cache holds, counted as the bytes of each
// function's build log and env plus cacheOverhead: a build log can be
// 64 KiB, and ten thousand functions must not keep that many in memory.
const (
	maxCacheBytes = 16 << 20
	cacheOverhead = 1 << 10
)

// cache keeps the functions that the store read and wrote, so that the
// reconciler's and the API's reads of a function (about ten per deploy)
// cost no statement, and no wait for the database's disk. It is correct
// because the store is the only writer of its table (a database belongs to
// one embedded server: its data directory's lock, and its reconcilers and
// trigger runners, would not work with two): every write puts the function
// as stored (or forgets it) once the write returned, writes of one function
// reach the cache in the order they committed (the store's per-function
// lock), and a read that overlapped a write keeps nothing of what it read.
// So the cache holds only what is durable.
//
// The cache is safe for concurrent use. It holds its own copies: get,
// fill and put copy what goes in and out, since callers may change a
// Function.
type cache struct {
	mu    sync.RWMutex
	fns   map[functions.Key]*functions.Function
	bytes int
	// epoch counts invalidations.
	epoch uint64
}

func newCache() *cache { return &cache{fns: map[functions.Key]*functions.Function{}} }

// get returns a copy of k's function, if the cache has it.
func (c *cache) get(k functions.Key) (*functions.Function, bool) {
	c.mu.RLock()
	fn, ok := c.fns[k]
	c.mu.RUnlock()
	if !ok {
		return nil, false
	}
	return clone(fn), true
}

// begin returns the epoch to give fill for a read that starts now.
func (c *cache) begin() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.epoch
}

// fill keeps a copy of fn, read from the database in a read that began at
// epoch, unless a write reached the cache since (what it read may be older
// than that write).
func (c *cache) fill(k functions.Key, fn *functions.Function, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch != epoch {
		return
	}
	c.keep(k, fn)
}

// put keeps a copy of fn as a write of it left it; call it after the write
// returned.
func (c *cache) put(k functions.Key, fn *functions.Function) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.keep(k, fn)
}

// keep stores a copy of fn under k, evicting entries to stay within
// maxCacheBytes. Called with mu held.
func (c *cache) keep(k functions.Key, fn *functions.Function) {
	size := cost(fn)
	if old, ok := c.fns[k]; ok {
		c.bytes -= cost(old)
		delete(c.fns, k)
	}
	for other, o := range c.fns {
		if c.bytes+size <= maxCacheBytes {
			break
		}
		// Any entry goes: a miss costs one read.
		c.bytes -= cost(o)
		delete(c.fns, other)
	}
	c.fns[k] = clone(fn)
	c.bytes += size
}

// invalidate forgets k's function; call it after a write of it that
// returned an error, or deleted it.
func (c *cache) invalidate(k functions.Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	if old, ok := c.fns[k]; ok {
		c.bytes -= cost(old)
		delete(c.fns, k)
	}
}

// cost is what fn counts against maxCacheBytes.
func cost(fn *functions.Function) int {
	n := cacheOverhead + len(fn.Status.BuildLog)
	for k, v := range fn.Env {
		n += len(k) + len(v)
	}
	return n
}

// clone returns a copy of fn that shares nothing a caller can change.
func clone(fn *functions.Function) *functions.Function {
	out := *fn
	out.Env = maps.Clone(fn.Env)
	out.Status.Conditions = slices.Clone(fn.Status.Conditions)
	return &out
}
