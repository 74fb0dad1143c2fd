// Package keylock serializes work per key: one mutex per key, made on first
// use.
package keylock

import "sync"

// Map holds a mutex per key. The zero value is ready to use; it is safe for
// concurrent use. Mutexes are kept for the map's lifetime, which suits keys
// that name long-lived objects.
type Map[K comparable] struct {
	mu    sync.Mutex
	locks map[K]*sync.Mutex
}

// Lock locks the key's mutex and returns its unlock function.
func (m *Map[K]) Lock(key K) (unlock func()) {
	m.mu.Lock()
	if m.locks == nil {
		m.locks = map[K]*sync.Mutex{}
	}
	l, ok := m.locks[key]
	if !ok {
		l = &sync.Mutex{}
		m.locks[key] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}
