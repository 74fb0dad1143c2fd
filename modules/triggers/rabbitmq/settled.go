package rabbitmq

import (
	"container/list"
	"sync"
)

// outcome is how a message was settled.
type outcome int

const (
	// ack: the invocation succeeded, or the message was dead-lettered.
	ack outcome = iota
	// reject: the message was rejected to the queue's own dead-lettering.
	reject
)

func (o outcome) String() string {
	if o == reject {
		return "reject"
	}
	return "ack"
}

// past is the outcome as a participle, for messages.
func (o outcome) past() string {
	if o == reject {
		return "rejected"
	}
	return "acknowledged"
}

// settledSet remembers the outcomes of the last messages a trigger
// settled, forgetting the least recently settled beyond its capacity. It is
// safe for concurrent use.
type settledSet struct {
	mu       sync.Mutex
	capacity int
	// order holds the entries, the most recently settled at the front.
	order *list.List
	index map[string]*list.Element
}

type settledEntry struct {
	key     string
	outcome outcome
}

func newSettledSet(capacity int) *settledSet {
	return &settledSet{capacity: capacity, order: list.New(), index: make(map[string]*list.Element)}
}

// add remembers the outcome of the message of key.
func (s *settledSet) add(key string, o outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.index[key]; ok {
		e.Value = settledEntry{key, o}
		s.order.MoveToFront(e)
		return
	}
	s.index[key] = s.order.PushFront(settledEntry{key, o})
	if s.order.Len() > s.capacity {
		oldest := s.order.Back()
		s.order.Remove(oldest)
		delete(s.index, oldest.Value.(settledEntry).key)
	}
}

// get returns the outcome of the message of key, if it is remembered.
func (s *settledSet) get(key string) (outcome, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.index[key]
	if !ok {
		return 0, false
	}
	return e.Value.(settledEntry).outcome, true
}
