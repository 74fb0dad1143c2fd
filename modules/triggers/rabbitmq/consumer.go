package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.kube5s.ru/sless/modules/triggers"
)

// dialTimeout bounds the TCP connect and then the TLS and AMQP handshakes,
// as the client's default dialer does.
const dialTimeout = 30 * time.Second

// consumer consumes the queue of one trigger, session after session: a
// session is one connection, ended by a failure or by stop.
type consumer struct {
	r      *Runner
	key    triggers.Key
	spec   spec
	memory *memory
	log    *slog.Logger
	scrub  scrubber

	// ctx ends when the consumer stops taking messages.
	ctx  context.Context
	stop context.CancelFunc

	mu sync.Mutex
	// healthy is whether the last thing reported of the trigger itself was
	// EventHealthy rather than EventError.
	healthy bool
}

// newConsumer returns the consumer of the trigger key running s; mem is
// what the trigger remembers of the messages it handled.
func (r *Runner) newConsumer(key triggers.Key, s spec, mem *memory) *consumer {
	ctx, stop := context.WithCancel(r.ctx)
	return &consumer{
		r: r, key: key, spec: s, memory: mem,
		log: r.log.With("namespace", key.Namespace, "trigger", key.Name, "function", s.function,
			"url", RedactURL(s.url), "queue", s.queue),
		scrub: newScrubber(s.url),
		ctx:   ctx, stop: stop,
	}
}

// run runs sessions until the consumer stops, waiting with backoff between
// them; a session that got as far as consuming resets the backoff.
func (c *consumer) run() {
	c.log.Info("starting to consume")
	defer c.log.Info("stopped consuming")
	failures := 0
	for {
		if c.session() {
			failures = 0
		}
		failures++
		if !sleep(c.ctx, c.r.cfg.reconnect.delay(failures)) {
			return
		}
	}
}

// session connects, consumes until the connection fails or the consumer
// stops, and returns once the invocations it started have finished, so
// that a redelivery of their messages on the next connection finds their
// outcome settled. It reports its failure and returns whether it got as far
// as consuming.
func (c *consumer) session() (consumed bool) {
	conn, err := c.dial()
	if err != nil {
		c.fail(fmt.Errorf("connect to %s: %w", RedactURL(c.spec.url), err))
		return false
	}
	// Whatever is unacknowledged when the connection closes goes back to
	// the queue, so the close has nothing to report.
	defer conn.Close()
	// A Stop out of time aborts what waits on the broker.
	defer context.AfterFunc(c.r.ctx, func() { conn.Close() })()
	s, err := c.setup(conn)
	if err != nil {
		c.fail(err)
		return false
	}
	c.ready()
	s.consume()
	return true
}

// dial connects to the broker, named so that an operator can find the
// connection in the broker's list. Stopping the consumer interrupts the
// connect and the handshakes.
func (c *consumer) dial() (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("sless trigger " + c.key.String())
	// The client's handshakes do not watch a context: closing the socket
	// ends them. Dial runs within DialConfig, which sets this before it
	// returns.
	stopWatching := func() bool { return false }
	conn, err := amqp.DialConfig(c.spec.url, amqp.Config{
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: dialTimeout}
			conn, err := d.DialContext(c.ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The client clears the deadline once the handshakes are done.
			if err := conn.SetDeadline(time.Now().Add(dialTimeout)); err != nil {
				conn.Close()
				return nil, err
			}
			stopWatching = context.AfterFunc(c.ctx, func() { conn.Close() })
			return conn, nil
		},
	})
	stopWatching()
	return conn, err
}

// session is one connection's consuming.
type session struct {
	c    *consumer
	conn *amqp.Connection
	// ch consumes the queue in transaction mode (see commit): every
	// acknowledgement, rejection and publish on it takes effect at the
	// commit that follows it.
	ch         *amqp.Channel
	tag        string
	deliveries <-chan amqp.Delivery
	// connClosed and chClosed receive the error that closes the connection
	// or the channel; the client sends it before it closes the deliveries.
	connClosed, chClosed chan *amqp.Error

	// txMu makes each transaction of ch (its operations and their commit)
	// one at a time, so that a commit takes only its own operations along
	// and a return read after it is that of its own publish.
	txMu    sync.Mutex
	returns chan amqp.Return
	// settleMu guards the settlements waiting for a shared commit (see
	// settle) and whether a run commits them now.
	settleMu  sync.Mutex
	unsettled []*settlement
	settling  bool

	// ctx ends with the session or when the consumer stops: handlers then
	// stop retrying and requeue their messages, since they could no longer
	// acknowledge them or are told to let go.
	ctx      context.Context
	end      context.CancelFunc
	handlers sync.WaitGroup
}

// setup makes the queue, the binding and the dead-letter target ready and
// starts consuming.
func (c *consumer) setup(conn *amqp.Connection) (*session, error) {
	if err := declareQueue(conn, c.spec.queue); err != nil {
		return nil, err
	}
	if c.spec.exchange != "" {
		if err := checkExchange(conn, c.spec.exchange); err != nil {
			return nil, err
		}
	}
	switch {
	case c.spec.deadLetterExchange != "":
		if err := checkExchange(conn, c.spec.deadLetterExchange); err != nil {
			return nil, fmt.Errorf("dead-letter %w", err)
		}
	case c.spec.deadLetterQueue != "":
		if err := declareQueue(conn, c.spec.deadLetterQueue); err != nil {
			return nil, fmt.Errorf("dead-letter %w", err)
		}
	}
	s := &session{c: c, conn: conn, tag: "sless trigger " + c.key.String()}
	s.connClosed = conn.NotifyClose(make(chan *amqp.Error, 1))
	var err error
	if s.ch, err = conn.Channel(); err != nil {
		return nil, fmt.Errorf("open a channel: %w", err)
	}
	s.chClosed = s.ch.NotifyClose(make(chan *amqp.Error, 1))
	s.returns = s.ch.NotifyReturn(make(chan amqp.Return, 1))
	if err := s.ch.Tx(); err != nil {
		return nil, fmt.Errorf("start transaction mode: %w", err)
	}
	if err := s.ch.Qos(c.spec.prefetch, 0, false); err != nil {
		return nil, fmt.Errorf("set the prefetch: %w", err)
	}
	if c.spec.exchange != "" {
		if err := s.ch.QueueBind(c.spec.queue, c.spec.routingKey, c.spec.exchange, false, nil); err != nil {
			return nil, fmt.Errorf("bind queue %q to exchange %q with routing key %q: %w", c.spec.queue, c.spec.exchange, c.spec.routingKey, err)
		}
	}
	if s.deliveries, err = s.ch.Consume(c.spec.queue, s.tag, false, false, false, false, nil); err != nil {
		return nil, fmt.Errorf("consume queue %q: %w", c.spec.queue, err)
	}
	s.ctx, s.end = context.WithCancel(c.ctx)
	return s, nil
}

// declareQueue declares a durable queue unless it exists. It looks first
// with a passive declare, so that a queue made with other arguments (its
// own dead-letter exchange, a type) is used as it is rather than failing a
// declare with ours; a failed passive declare closes its channel, hence a
// throwaway one.
func declareQueue(conn *amqp.Connection, name string) error {
	exists, err := probe(conn, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		return err
	})
	if err != nil {
		return fmt.Errorf("queue %q: %w", name, err)
	}
	if exists {
		return nil
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open a channel: %w", err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare queue %q: %w", name, err)
	}
	return nil
}

// checkExchange fails unless the exchange exists: the trigger binds to an
// exchange, it does not make one up with a type of its choosing.
func checkExchange(conn *amqp.Connection, name string) error {
	exists, err := probe(conn, func(ch *amqp.Channel) error {
		return ch.ExchangeDeclarePassive(name, amqp.ExchangeDirect, true, false, false, false, nil)
	})
	switch {
	case err != nil:
		return fmt.Errorf("exchange %q: %w", name, err)
	case !exists:
		return fmt.Errorf("exchange %q does not exist: declare it, or fix the trigger's exchange", name)
	}
	return nil
}

// probe runs a passive declare on a channel of its own and reports whether
// the entity exists: a 404 is not an error.
func probe(conn *amqp.Connection, declare func(*amqp.Channel) error) (bool, error) {
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("open a channel: %w", err)
	}
	defer ch.Close() // closed already when the declare failed
	err = declare(ch)
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
		return false, nil
	}
	return err == nil, err
}

// consume hands each delivery to a handler goroutine until the consumer
// stops or the connection fails, then waits for the handlers.
func (s *session) consume() {
	defer s.handlers.Wait()
	defer s.end()
	for {
		select {
		case d, ok := <-s.deliveries:
			if !ok {
				s.c.fail(s.lost())
				return
			}
			if s.c.ctx.Err() != nil {
				// Stopped at the same time: leave it to the next consumer.
				s.requeue(&d)
				continue
			}
			s.handlers.Add(1)
			go s.handle(d)
		case err := <-s.connClosed:
			s.c.fail(closed("the connection", err))
			return
		case err := <-s.chClosed:
			s.c.fail(closed("the channel", err))
			return
		case <-s.c.ctx.Done():
			s.stopConsuming()
			return
		}
	}
}

// lost says why the deliveries ended: the connection's error, else the
// channel's, else the broker cancelled the consumer. The client sends the
// connection's and the channel's errors before it closes the deliveries, so
// they are there to read.
func (s *session) lost() error {
	select {
	case err := <-s.connClosed:
		return closed("the connection", err)
	default:
	}
	select {
	case err := <-s.chClosed:
		return closed("the channel", err)
	default:
	}
	return fmt.Errorf("the broker cancelled the consumer of queue %q (was the queue deleted?)", s.c.spec.queue)
}

// closed says what closed, with the broker's or the client's error; err
// is nil when this process closed it.
func closed(what string, err *amqp.Error) error {
	if err == nil {
		return fmt.Errorf("%s was closed", what)
	}
	return fmt.Errorf("%s was lost: %w", what, err)
}

// stopConsuming cancels the consumer and requeues the deliveries already
// on their way, so that only the in-flight invocations hold messages while
// they finish.
func (s *session) stopConsuming() {
	if err := s.ch.Cancel(s.tag, false); err != nil {
		// The channel is gone, and the broker requeued what it held.
		return
	}
	for d := range s.deliveries {
		s.requeue(&d)
	}
}

// fail reports that the trigger itself fails; it is retried. A stopping
// consumer's failures are of its own making and not reported.
func (c *consumer) fail(err error) {
	if c.ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	c.healthy = false
	c.mu.Unlock()
	msg := c.scrub.scrub(err.Error())
	c.log.Warn("rabbitmq trigger failing; retrying", "error", msg)
	c.report(triggers.EventError, msg)
}

// ready reports EventHealthy unless the trigger is known healthy: after a
// failure, and on a consumer's first session, so that an Error left by an
// earlier spec or process is cleared. A stopping consumer is not healthy.
func (c *consumer) ready() {
	if c.ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	was := c.healthy
	c.healthy = true
	c.mu.Unlock()
	if !was {
		c.log.Info("consuming")
		c.report(triggers.EventHealthy, "")
	}
}

// report sends an event of the trigger, scrubbed of the URL's password.
func (c *consumer) report(kind, msg string) {
	c.r.rep.Report(c.key, triggers.Event{Kind: kind, At: time.Now(), Message: c.scrub.scrub(msg)})
}

// sleep waits d, or until ctx ends; it reports whether the whole delay
// passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
