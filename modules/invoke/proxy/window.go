package proxy

import (
	"cmp"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/server/httpx"
)

// The window of a function's recent figures: slots of a minute each, so
// that the last hour is the current minute and the 59 before it.
const (
	slotSeconds   = 60
	windowSlots   = 60
	windowSeconds = slotSeconds * windowSlots
)

// slot counts the invocations that ended in one minute.
type slot struct {
	// minute is the Unix minute the counts are of; a slot is reset when
	// its minute comes round again an hour later.
	minute               atomic.Int64
	calls, errors, colds atomic.Uint64
	durations            [len(durationBuckets) + 1]atomic.Uint64
}

// window is a function's last hour of invocations, the figures of
// GET /v1/namespaces/{ns}/stats. Counting takes no lock but once a minute,
// when a slot is reused.
type window struct {
	mu    sync.Mutex
	slots [windowSlots]slot
}

// slotAt returns the slot of the minute of Unix time sec, reset when it
// held an older minute.
func (w *window) slotAt(sec int64) *slot {
	m := sec / slotSeconds
	s := &w.slots[m%windowSlots]
	if s.minute.Load() != m {
		w.mu.Lock()
		if s.minute.Load() != m {
			s.calls.Store(0)
			s.errors.Store(0)
			s.colds.Store(0)
			for i := range s.durations {
				s.durations[i].Store(0)
			}
			s.minute.Store(m)
		}
		w.mu.Unlock()
	}
	return s
}

// observe counts an invocation that ended at end with outcome o; d is its
// duration, cold whether it started an instance, ran whether it ran at all
// (a refusal at capacity did not, and has no duration).
func (w *window) observe(end time.Time, o outcome, d time.Duration, cold, ran bool) {
	s := w.slotAt(end.Unix())
	s.calls.Add(1)
	if o > outcome4xx {
		s.errors.Add(1)
	}
	if cold {
		s.colds.Add(1)
	}
	if ran {
		s.durations[sort.SearchFloat64s(durationBuckets[:], d.Seconds())].Add(1)
	}
}

// stats sums the slots of the hour before now.
func (w *window) stats(now time.Time) invoke.FunctionStats {
	cur := now.Unix() / slotSeconds
	var st invoke.FunctionStats
	var buckets [len(durationBuckets) + 1]uint64
	for i := range w.slots {
		s := &w.slots[i]
		if m := s.minute.Load(); m <= cur-windowSlots || m > cur {
			continue
		}
		st.Invocations += int64(s.calls.Load())
		st.Errors += int64(s.errors.Load())
		st.ColdStarts += int64(s.colds.Load())
		for b := range buckets {
			buckets[b] += s.durations[b].Load()
		}
	}
	st.WindowSeconds = windowSeconds
	st.RatePerSecond = float64(st.Invocations) / windowSeconds
	st.P50MS = quantile(0.5, buckets[:]) * 1000
	st.P99MS = quantile(0.99, buckets[:]) * 1000
	return st
}

// quantile estimates the q-quantile in seconds of the observations counted
// in buckets (durationBuckets' upper bounds, then +Inf) as Prometheus's
// histogram_quantile does: linearly within the bucket that holds it, the
// highest finite bound for the +Inf bucket; 0 without observations.
func quantile(q float64, buckets []uint64) float64 {
	var total uint64
	for _, n := range buckets {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var below uint64
	for i, n := range buckets {
		if n == 0 || float64(below+n) < rank {
			below += n
			continue
		}
		if i == len(durationBuckets) {
			return durationBuckets[len(durationBuckets)-1]
		}
		lower := 0.0
		if i > 0 {
			lower = durationBuckets[i-1]
		}
		return lower + (durationBuckets[i]-lower)*(rank-float64(below))/float64(n)
	}
	return durationBuckets[len(durationBuckets)-1]
}

// namespaceStats returns the last hour's figures of the functions of ns
// that have any, by name.
func (m *metrics) namespaceStats(ns string, now time.Time) []invoke.FunctionStats {
	m.mu.RLock()
	defer m.mu.RUnlock()
	items := []invoke.FunctionStats{}
	for k, fs := range m.fns {
		if k.Namespace != ns {
			continue
		}
		st := fs.recent.stats(now)
		if st.Invocations == 0 {
			continue
		}
		st.Function = k.Name
		items = append(items, st)
	}
	slices.SortFunc(items, func(a, b invoke.FunctionStats) int { return cmp.Compare(a.Function, b.Function) })
	return items
}

// serveStats answers GET /v1/namespaces/{ns}/stats.
func (p *Proxy) serveStats(c *gin.Context) {
	c.JSON(http.StatusOK, httpx.ListResponse[invoke.FunctionStats]{Items: p.metrics.namespaceStats(c.Param("ns"), time.Now())})
}
