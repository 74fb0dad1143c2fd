package rabbitmq

import (
	"container/list"
	"sync"
)

// outcome is how a message was settled.
type outcome int

const (
	// unsettled: the message ran and failed, and it is not settled yet.
	unsettled outcome = iota
	// ack: the invocation succeeded, or the message was dead-lettered.
	ack
	// reject: the message was rejected to the queue's own dead-lettering.
	reject
	// replaced: the message was acknowledged in the transaction that put
	// its retry copy, which carries its runs on, in the queue.
	replaced
)

func (o outcome) String() string {
	switch o {
	case ack:
		return "ack"
	case reject:
		return "reject"
	case replaced:
		return "replaced"
	}
	return "unsettled"
}

// past is the outcome of a settled message as a participle, for messages.
func (o outcome) past() string {
	switch o {
	case reject:
		return "rejected"
	case replaced:
		return "replaced by its retry copy"
	}
	return "acknowledged"
}

// memo is what a trigger remembers of a message: how it was settled, or,
// while it is not, how far its runs got. The latter covers what the broker
// does not know yet: a run that failed when the connection was lost before
// the transaction of the retry copy that counts it was committed.
type memo struct {
	outcome outcome
	// history holds the runs of an unsettled message.
	history history
}

// memory remembers what happened to the last messages a trigger handled,
// forgetting the least recently handled beyond its capacity. It is safe
// for concurrent use.
type memory struct {
	mu       sync.Mutex
	capacity int
	// order holds the entries, the most recently handled at the front.
	order *list.List
	index map[string]*list.Element
}

type memoryEntry struct {
	key  string
	memo memo
}

func newMemory(capacity int) *memory {
	return &memory{capacity: capacity, order: list.New(), index: make(map[string]*list.Element)}
}

// add remembers m of the message of key.
func (s *memory) add(key string, m memo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.index[key]; ok {
		e.Value = memoryEntry{key, m}
		s.order.MoveToFront(e)
		return
	}
	s.index[key] = s.order.PushFront(memoryEntry{key, m})
	if s.order.Len() > s.capacity {
		oldest := s.order.Back()
		s.order.Remove(oldest)
		delete(s.index, oldest.Value.(memoryEntry).key)
	}
}

// get returns what is remembered of the message of key, if anything.
func (s *memory) get(key string) (memo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.index[key]
	if !ok {
		return memo{}, false
	}
	return e.Value.(memoryEntry).memo, true
}
