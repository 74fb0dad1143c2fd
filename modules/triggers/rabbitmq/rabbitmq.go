// Package rabbitmq runs rabbitmq triggers: per trigger a consumer that
// invokes the trigger's function once per message of its queue.
//
// The consumer connects in the background and reconnects with backoff when
// the broker or the network fails, reporting EventError and, once it
// consumes again, EventHealthy. Deliveries run concurrently, as many as the
// trigger's prefetch lets the broker send.
//
// Retries: the count of a message's runs travels with the message, so that
// max_retries holds across lost connections, broker restarts and sless
// restarts. The consuming channel is in transaction mode. After a failed
// invocation (an error or a non-2xx answer) with retries left, the
// consumer publishes a retry copy of the message to its queue (through the
// default exchange) whose headers say how many runs failed
// (x-sless-attempts), why the last did (x-sless-error), when the next may
// start (x-sless-retry-at: exponential backoff) and where the message was
// first published, and acknowledges the delivery in the same transaction:
// the broker applies both or neither, so a crash or a lost connection at
// any moment leaves the message in the queue once, as the delivery or as
// its copy. The consumer that gets the copy holds it unacknowledged until
// its retry time, so that it waits in the broker and goes back to the
// queue if that consumer goes away. Once the retries are spent the message
// is dead-lettered, its x-sless-attempts counting every run: to the
// trigger's dead-letter queue in one transaction with its
// acknowledgement, so that it is dead-lettered once; to its dead-letter
// exchange first and acknowledged after, since the exchange may route it
// nowhere (the broker says so only at the commit), in which case it stays
// and the dead letter is retried: a crash of sless between the two commits
// dead-letters it twice. With neither, it is republished once more so that
// its headers count the last run, and then rejected so that the queue's
// own dead-letter settings apply.
//
// Why headers rather than the broker's count: x-delivery-count exists on
// quorum queues only, and sless declares (and users have) classic durable
// queues; it also counts redeliveries that ran nothing (a consumer that
// went away with prefetched messages). A run whose transaction did not
// commit (sless crashed during the run or before its commit) is not
// counted and runs again. Transactions cost a round trip to the broker,
// which concurrent acknowledgements and rejections share (one commit
// settles the messages that finished while the previous commit was in
// progress); a retry copy or dead letter has a commit of its own. They
// hold as far as the broker's own acknowledgements do: a broker that
// crashes (rather than stops) may bring back a message whose
// acknowledgement it had not written yet, as for any consumer.
//
// Delivery guarantee: at least once, and settled work is not repeated. A
// message is acknowledged only after an invocation answered 2xx, with its
// retry copy or dead letter, or after it; until then it is unacknowledged,
// so a lost connection or a crash returns it to the queue and it runs
// again. A message whose invocation succeeded but whose acknowledgement was
// lost (the connection died in between) comes back redelivered; the
// consumer then acknowledges it without invoking again (and a lost
// rejection is rejected again), and a failed run whose retry copy could not
// be committed is counted on the redelivery. For that each trigger
// remembers what happened to the last 10,000 messages it handled: by
// message_id (and the runs its copy counts) when they have one, and
// otherwise by a hash of exchange, routing key, headers and body, which is
// looked up only for redeliveries and retry copies, so that a new message
// that happens to equal an old one still runs. The memory is per process:
// when the server restarts between an invocation and its acknowledgement,
// or another replica gets the redelivery, the invocation is repeated.
//
// The broker URL's password never appears in logs, events or errors: URLs
// are shown through RedactURL, and every message is scrubbed of the
// password as well.
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/triggers"
)

// Defaults of the trigger fields that may be left out.
const (
	// DefaultPrefetch is the prefetch of a trigger that sets none (0).
	DefaultPrefetch = 10
	// DefaultMaxRetries is the max_retries of a trigger that sets none.
	DefaultMaxRetries = 3
)

// memoryCapacity is how many handled messages a trigger remembers to
// recognize their redeliveries; at a few hundred bytes each, 10,000 bound
// the memory to a few megabytes per trigger.
const memoryCapacity = 10_000

// backoff is an exponential delay: base after the first failure, doubled
// after each further one, up to max.
type backoff struct {
	base, max time.Duration
}

// delay returns the wait after the n-th consecutive failure (n >= 1).
func (b backoff) delay(n int) time.Duration {
	d := b.base
	for i := 1; i < n && d < b.max; i++ {
		d *= 2
	}
	return min(d, b.max)
}

// config is what Options change.
type config struct {
	// retry spaces the retries of a failed invocation and of a failed
	// dead-letter publish.
	retry backoff
	// reconnect spaces the connection attempts after a failure.
	reconnect backoff
}

// Option changes a default of New. The options exist for tests, which need
// short delays.
type Option func(*config)

// WithRetryBackoff sets the delay before the first retry of a failed
// invocation and the cap of its doubling; the defaults are 1s and 30s.
func WithRetryBackoff(base, max time.Duration) Option {
	return func(c *config) { c.retry = backoff{base, max} }
}

// WithReconnectBackoff sets the delay before reconnecting after the
// connection failed and the cap of its doubling; the defaults are 1s and
// 30s.
func WithReconnectBackoff(base, max time.Duration) Option {
	return func(c *config) { c.reconnect = backoff{base, max} }
}

// Runner implements triggers.Runner for rabbitmq triggers.
type Runner struct {
	inv invoke.Invoker
	rep triggers.Reporter
	log *slog.Logger
	cfg config

	// ctx lives from New until Stop ends: consumers derive theirs from it
	// and invocations run under it, so that Remove lets invocations finish
	// while a Stop out of time aborts them.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	consumers map[triggers.Key]*consumer
	stopped   bool
	// running counts consumer goroutines, removed ones included, until
	// their in-flight invocations have finished.
	running sync.WaitGroup
}

var _ triggers.Runner = (*Runner)(nil)

// New returns a Runner that invokes functions with inv and reports to rep.
func New(inv invoke.Invoker, rep triggers.Reporter, log *slog.Logger, opts ...Option) *Runner {
	cfg := config{
		retry:     backoff{time.Second, 30 * time.Second},
		reconnect: backoff{time.Second, 30 * time.Second},
	}
	for _, opt := range opts {
		opt(&cfg)
	}
	// The runner outlives any caller's context: it stops on Stop only.
	ctx, cancel := context.WithCancel(context.Background())
	return &Runner{
		inv: inv, rep: rep, log: log, cfg: cfg,
		ctx: ctx, cancel: cancel,
		consumers: make(map[triggers.Key]*consumer),
	}
}

// Apply implements triggers.Runner: it starts consuming for t, restarts the
// consumer when a field it uses changed, and stops it when t is disabled.
// The connection is made in the background; an unusable spec (a bad URL, no
// queue) is an error.
func (r *Runner) Apply(_ context.Context, t *triggers.Trigger) error {
	if t.Type != triggers.TypeRabbitMQ {
		return fmt.Errorf("trigger %s is of type %q, not %q", t.Key(), t.Type, triggers.TypeRabbitMQ)
	}
	if !t.IsEnabled() {
		r.Remove(t.Key())
		return nil
	}
	s, err := newSpec(t)
	if err != nil {
		return fmt.Errorf("trigger %s: %w", t.Key(), err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return fmt.Errorf("trigger %s: the rabbitmq runner is stopped", t.Key())
	}
	old := r.consumers[t.Key()]
	if old != nil && old.spec == s {
		return nil
	}
	mem := newMemory(memoryCapacity)
	if old != nil {
		old.stop()
		// The messages the old consumer handled may come back to the new
		// one: their acknowledgements can be lost like any other.
		mem = old.memory
	}
	c := r.newConsumer(t.Key(), s, mem)
	r.consumers[t.Key()] = c
	r.running.Go(c.run)
	return nil
}

// Remove implements triggers.Runner: the consumer stops taking messages at
// once, and its in-flight invocations finish in the background before its
// connection closes.
func (r *Runner) Remove(key triggers.Key) {
	r.mu.Lock()
	c := r.consumers[key]
	delete(r.consumers, key)
	r.mu.Unlock()
	if c != nil {
		c.stop()
	}
}

// Stop implements triggers.Runner. When ctx ends before the in-flight
// invocations, they are cancelled and their messages go back to their
// queues.
func (r *Runner) Stop(ctx context.Context) error {
	r.mu.Lock()
	r.stopped = true
	for _, c := range r.consumers {
		c.stop()
	}
	clear(r.consumers)
	r.mu.Unlock()
	defer r.cancel()
	done := make(chan struct{})
	go func() {
		r.running.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping the rabbitmq triggers: cancelled the invocations still running: %w", ctx.Err())
	}
}

// spec is what a consumer runs: the fields of a trigger whose change
// restarts it, with defaults applied. It is comparable, so that Apply can
// tell a change.
type spec struct {
	function                            string
	url, queue, exchange, routingKey    string
	prefetch, maxRetries                int
	deadLetterExchange, deadLetterQueue string
}

// newSpec checks t's fields and applies the defaults.
func newSpec(t *triggers.Trigger) (spec, error) {
	m := t.RabbitMQSpec
	s := spec{
		function: t.Function,
		url:      m.URL, queue: m.Queue, exchange: m.Exchange, routingKey: m.RoutingKey,
		prefetch: m.Prefetch, maxRetries: DefaultMaxRetries,
		deadLetterExchange: m.DeadLetterExchange, deadLetterQueue: m.DeadLetterQueue,
	}
	if m.MaxRetries != nil {
		s.maxRetries = *m.MaxRetries
	}
	if s.prefetch == 0 {
		s.prefetch = DefaultPrefetch
	}
	switch {
	case s.function == "":
		return spec{}, errors.New("no function")
	case s.queue == "":
		return spec{}, errors.New("no queue")
	case s.prefetch < 0 || s.prefetch > math.MaxUint16:
		return spec{}, fmt.Errorf("prefetch %d is not within 0..%d", s.prefetch, math.MaxUint16)
	case s.maxRetries < 0:
		return spec{}, fmt.Errorf("max_retries %d is negative", s.maxRetries)
	}
	if err := ValidateURL(s.url); err != nil {
		return spec{}, fmt.Errorf("url %w", err)
	}
	return s, nil
}
