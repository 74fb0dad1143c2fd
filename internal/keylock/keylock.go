// Package keylock serializes work per key: one mutex per key, made on first
// use and dropped once no one holds or waits for it.
package keylock

import "sync"

// Map holds a mutex per key. The zero value is ready to use; it is safe for
// concurrent use. A key's mutex exists only while someone holds or waits
// for it, so a map of keys that come and go (functions created and
// deleted, builds of ever new code) does not grow with every key it saw.
type Map[K comparable] struct {
	mu    sync.Mutex
	locks map[K]*entry
}

type entry struct {
	mu   sync.Mutex
	refs int // holders and waiters; by Map.mu
}

// Lock locks the key's mutex and returns its unlock function, which must be
// called once.
func (m *Map[K]) Lock(key K) (unlock func()) {
	m.mu.Lock()
	if m.locks == nil {
		m.locks = map[K]*entry{}
	}
	e, ok := m.locks[key]
	if !ok {
		e = &entry{}
		m.locks[key] = e
	}
	e.refs++
	m.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		m.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(m.locks, key)
		}
		m.mu.Unlock()
	}
}
