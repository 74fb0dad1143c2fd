package keylock

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestLockExcludesPerKey(t *testing.T) {
	var m Map[string]
	var wg sync.WaitGroup
	var counts [2]int // one per key, so that only the same key's holders share one
	for i := range 8 {
		k := i % 2
		key := []string{"a", "b"}[k]
		wg.Go(func() {
			for range 1000 {
				unlock := m.Lock(key)
				n := counts[k]
				runtime.Gosched() // a holder that is not alone loses increments
				counts[k] = n + 1
				unlock()
			}
		})
	}
	wg.Wait()
	if counts != [2]int{4000, 4000} {
		t.Fatalf("counts = %v; want 4000 each", counts)
	}
}

func TestOtherKeysDoNotWait(t *testing.T) {
	var m Map[string]
	unlock := m.Lock("a")
	defer unlock()
	done := make(chan struct{})
	go func() {
		m.Lock("b")()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("locking b waited for a's holder")
	}
}

// The map keeps no mutex that no one holds or waits for, however many keys
// it saw, and a key locked again after its mutex went still excludes.
func TestMapForgetsUnusedKeys(t *testing.T) {
	var m Map[int]
	for i := range 1000 {
		m.Lock(i)()
	}
	unlock := m.Lock(1)
	waited := make(chan struct{})
	go func() {
		m.Lock(1)()
		close(waited)
	}()
	select {
	case <-waited:
		t.Fatal("a second Lock of a held key did not wait")
	case <-time.After(50 * time.Millisecond):
	}
	unlock()
	<-waited
	m.mu.Lock()
	n := len(m.locks)
	m.mu.Unlock()
	if n != 0 {
		t.Fatalf("the map keeps %d mutexes after every holder unlocked; want 0", n)
	}
}
