package rabbitmq

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/triggers"
)

// maxReasonLen bounds why an invocation failed as events and the
// x-sless-error header carry it: a handler's error can be long.
const maxReasonLen = 256

// handle runs one delivery to its outcome: acknowledged after a 2xx answer,
// replaced by its retry copy after a failed run while retries are left,
// dead-lettered or rejected once they are spent, or requeued when the
// session ends or the consumer stops before it is settled. A delivery runs
// at most once: its next run is its retry copy's.
//
// The count of runs travels with the message: a failed run is followed by
// a retry copy that carries it, published to the queue in one transaction
// with the acknowledgement of the delivery (see republish), so that neither
// a lost connection, a broker restart nor a sless restart starts the count
// again, and the message is never both in the queue and replaced by its
// copy. The copy waits for its retry time unacknowledged, held by the
// consumer that got it: in the queue for the broker, which delivers it
// again if the consumer goes away.
func (s *session) handle(d amqp.Delivery) {
	defer s.handlers.Done()
	c := s.c
	h := historyOf(&d)
	key, check := settledKey(&d, h.runs)
	if check {
		if m, ok := c.memory.get(key); ok {
			if m.outcome != unsettled {
				s.settleAgain(&d, m.outcome)
				return
			}
			// A run failed that the delivery in hand does not count: the
			// transaction of its retry copy did not commit.
			if m.history.runs > h.runs {
				h = m.history
			}
		}
	}
	attempts := c.spec.maxRetries + 1
	if h.runs < attempts {
		if !s.wait(h) {
			s.requeue(&d)
			return
		}
		why := s.attempt(&d, h)
		if why == "" {
			c.memory.add(key, memo{outcome: ack})
			s.ack(&d)
			return
		}
		h = h.failed(why, c.r.cfg.retry.delay(h.runs+1))
		c.memory.add(key, memo{history: h})
		// The queue's own dead-lettering takes a rejected message as it was
		// delivered, so that one is republished too, for its headers to
		// count the last run.
		if h.runs < attempts || !s.hasDeadLetterTarget() {
			s.republish(&d, key, h)
			return
		}
	}
	s.deadLetter(&d, key, h)
}

// wait waits until the next run of a message with history h may start:
// until its retry time, but no longer than this trigger's own backoff after
// h.runs failures, so that a shortened backoff applies to the copies made
// before and a clock that differs from the copy's maker holds no message
// for longer. It reports whether the session is still there.
func (s *session) wait(h history) bool {
	if h.runs == 0 {
		return true
	}
	d := min(time.Until(h.retryAt), s.c.r.cfg.retry.delay(h.runs))
	if d <= 0 {
		return s.ctx.Err() == nil
	}
	return sleep(s.ctx, d)
}

// attempt invokes the function once for d, the run after those of h, and
// reports it. It returns why the run failed, or "" when it succeeded.
func (s *session) attempt(d *amqp.Delivery, h history) string {
	c := s.c
	n := h.runs + 1
	c.report(triggers.EventFired, "")
	resp, err := c.r.inv.Invoke(c.r.ctx, c.request(d, h))
	var why string
	switch {
	case err != nil:
		why = "invoke: " + err.Error()
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		why = fmt.Sprintf("status %d", resp.StatusCode)
		if resp.Error != "" {
			why += ": " + resp.Error
		}
	default:
		c.report(triggers.EventSucceeded, fmt.Sprintf("status %d", resp.StatusCode))
		return ""
	}
	why = truncate(c.scrub.scrub(why), maxReasonLen)
	id := ""
	if resp != nil {
		id = resp.InvocationID
	}
	c.log.Info("invocation failed", "invocation_id", id, "message_id", d.MessageId, "attempt", n, "reason", why)
	c.report(triggers.EventFailed, fmt.Sprintf("attempt %d of %d: %s", n, c.spec.maxRetries+1, why))
	return why
}

// request is the invocation of d's run after those of h.
func (c *consumer) request(d *amqp.Delivery, h history) invoke.Request {
	return invoke.Request{
		Namespace:   c.key.Namespace,
		Function:    c.spec.function,
		Method:      http.MethodPost,
		Header:      http.Header{"Content-Type": {cmp.Or(d.ContentType, "application/json")}},
		Body:        d.Body,
		TriggerKind: invoke.KindRabbitMQ,
		TriggerName: c.key.Name,
		TriggerMeta: map[string]any{"message": messageMeta(d, c.spec.queue, h)},
	}
}

// republish replaces d in its queue by its retry copy, carrying h: in one
// transaction the copy is published through the default exchange, so that
// it reaches this queue only, and d is acknowledged. The broker applies
// both or neither, so the message is never in the queue twice: a commit
// lost with the connection either happened (d is gone, the copy runs on)
// or did not (d comes back, and the memory holds the count of its runs
// for the redelivery).
func (s *session) republish(d *amqp.Delivery, key string, h history) {
	c := s.c
	err := s.commit(func() error {
		if err := s.publish("", c.spec.queue, retryCopy(d, c.key, h)); err != nil {
			return err
		}
		return d.Ack(false)
	})
	switch {
	case errors.Is(err, errReturned):
		// The acknowledgement was committed with it, but the queue and d
		// with it are gone: the broker routes the default exchange to
		// every queue there is.
		c.log.Warn("the queue is gone; its message's retry copy with it", "message_id", d.MessageId, "error", err)
	case err != nil:
		c.log.Warn("could not replace the message by its retry copy; it comes back with the next session", "message_id", d.MessageId, "error", c.scrub.scrub(err.Error()))
	default:
		c.memory.add(key, memo{outcome: replaced})
	}
}

// hasDeadLetterTarget reports whether the trigger publishes dead letters
// rather than rejecting them.
func (s *session) hasDeadLetterTarget() bool {
	return s.c.spec.deadLetterExchange != "" || s.c.spec.deadLetterQueue != ""
}

// deadLetter takes d out of the queue after the runs of h failed and no
// retry is left: published to the trigger's dead-letter exchange or queue
// and acknowledged (see publishDeadLetter), or, with neither, rejected. A
// dead letter that cannot be published is retried with backoff while d is
// held.
func (s *session) deadLetter(d *amqp.Delivery, key string, h history) {
	c := s.c
	if !s.hasDeadLetterTarget() {
		c.memory.add(key, memo{outcome: reject})
		s.reject(d)
		c.report(triggers.EventDeadLettered, fmt.Sprintf("rejected after %d attempts (%s); the queue's own dead-letter settings apply", h.runs, h.why))
		return
	}
	exchange, routingKey, target := s.deadLetterTarget(h)
	msg := deadLetterMessage(d, c.key, h)
	for n := 1; ; n++ {
		err := s.publishDeadLetter(d, key, h, exchange, routingKey, msg)
		if err == nil {
			if n > 1 {
				c.ready()
			}
			break
		}
		if errors.Is(err, errSettled) {
			c.log.Error("message dead-lettered to a queue deleted meanwhile", "message_id", d.MessageId, "error", c.scrub.scrub(err.Error()))
			return
		}
		c.fail(fmt.Errorf("dead-letter a message to %s: %w", target, err))
		if !sleep(s.ctx, c.r.cfg.retry.delay(n)) {
			s.requeue(d)
			return
		}
	}
	c.log.Warn("message dead-lettered", "message_id", d.MessageId, "attempts", h.runs, "reason", h.why, "to", target)
	c.report(triggers.EventDeadLettered, fmt.Sprintf("after %d attempts (%s): published to %s", h.runs, h.why, target))
}

// errSettled means that publishDeadLetter settled d although the dead
// letter was not published.
var errSettled = errors.New("the message was settled")

// publishDeadLetter publishes msg, the dead letter of d, to exchange with
// routingKey and acknowledges d; it returns nil once both are done, and an
// error with d still held otherwise, or one wrapping errSettled.
//
// To a dead-letter queue (through the default exchange) the two are one
// transaction, made right after the queue was declared, so that d is
// dead-lettered once whatever fails. To an exchange the dead letter is
// committed first and d acknowledged after it: the exchange may route it
// to no queue, which the broker says only at the commit, and d must then
// stay in the queue. Between the two commits a lost connection is covered
// by the memory (the redelivery is acknowledged without running), but a
// crash of sless dead-letters d twice.
//
// A dead-letter queue deleted between its declaration and the commit
// returns the dead letter while d's acknowledgement is committed: its
// retry copy, counting every run, is published to the queue then, to be
// dead-lettered anew, and the error wraps errSettled.
func (s *session) publishDeadLetter(d *amqp.Delivery, key string, h history, exchange, routingKey string, msg amqp.Publishing) error {
	c := s.c
	if exchange != "" {
		if err := s.commit(func() error { return s.publish(exchange, routingKey, msg) }); err != nil {
			return err
		}
		c.memory.add(key, memo{outcome: ack})
		s.ack(d)
		return nil
	}
	if err := declareQueue(s.conn, routingKey); err != nil {
		return err
	}
	err := s.commit(func() error {
		if err := s.publish("", routingKey, msg); err != nil {
			return err
		}
		return d.Ack(false)
	})
	if !errors.Is(err, errReturned) {
		if err == nil {
			c.memory.add(key, memo{outcome: ack})
		}
		return err
	}
	c.memory.add(key, memo{outcome: replaced})
	if cerr := s.commit(func() error { return s.publish("", c.spec.queue, retryCopy(d, c.key, h)) }); cerr != nil {
		return fmt.Errorf("%w, and lost: %w; its retry copy could not be published: %w", errSettled, err, cerr)
	}
	return fmt.Errorf("%w: %w; its retry copy is back in the queue", errSettled, err)
}

// deadLetterTarget returns where the dead letter of a message with
// history h goes: the dead-letter exchange with the message's original
// routing key when there is one, else the dead-letter queue through the
// default exchange; and how to name that in messages.
func (s *session) deadLetterTarget(h history) (exchange, routingKey, target string) {
	if x := s.c.spec.deadLetterExchange; x != "" {
		return x, h.routingKey, fmt.Sprintf("exchange %q", x)
	}
	q := s.c.spec.deadLetterQueue
	return "", q, fmt.Sprintf("queue %q", q)
}

// errReturned means that the broker returned a publish of a transaction:
// no queue took it. The rest of the transaction was committed.
var errReturned = errors.New("no queue took the message")

// commit runs ops, which acknowledge, reject and publish on the consuming
// channel, and commits them as one transaction: RabbitMQ applies a
// transaction at its commit, its publishes and then its acknowledgements,
// and a channel that closes before the commit discards it. When ops fail,
// what they did is rolled back. A publish that no queue took is returned
// at the commit, which applies the rest anyway: commit then returns an
// error wrapping errReturned. A commit error (the channel is gone) leaves
// it unknown whether the broker applied the transaction.
func (s *session) commit(ops func() error) error {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if err := ops(); err != nil {
		// A rollback fails only with the channel, which discards the
		// transaction as well.
		_ = s.ch.TxRollback()
		return err
	}
	if err := s.ch.TxCommit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	// The broker sends a return before the commit's answer, and the client
	// hands it over before it hands over the answer.
	select {
	case ret, ok := <-s.returns:
		if ok {
			return fmt.Errorf("%w: %d %s", errReturned, ret.ReplyCode, ret.ReplyText)
		}
	default:
	}
	return nil
}

// publish publishes msg (a retry copy or a dead letter) as mandatory on
// the consuming channel, within the transaction of a commit. It is part of
// the in-flight work that a stopping consumer lets finish, so only a Stop
// out of time interrupts it.
func (s *session) publish(exchange, routingKey string, msg amqp.Publishing) error {
	return s.ch.PublishWithContext(s.c.r.ctx, exchange, routingKey, true, false, msg)
}

// settleAgain settles a redelivery of a message this trigger settled
// already, whose acknowledgement or rejection was lost, the same way and
// without invoking again.
func (s *session) settleAgain(d *amqp.Delivery, o outcome) {
	c := s.c
	c.log.Info("redelivered message already settled; not invoking again", "message_id", d.MessageId, "outcome", o.String())
	if o == reject {
		s.reject(d)
	} else {
		s.ack(d)
	}
	c.report(triggers.EventSkipped, fmt.Sprintf("a redelivery of a message already %s: settled again without invoking", o.past()))
}

// settlement is an acknowledgement or rejection waiting for a commit
// shared with others (see settle).
type settlement struct {
	op func() error
	// done gets the outcome of the commit that took op along, or
	// errYourTurn.
	done chan error
}

// errYourTurn tells a waiting settlement that its run commits the
// settlements waiting now, its own among them.
var errYourTurn = errors.New("commit the waiting settlements")

// settle runs op, which acknowledges or rejects a delivery and publishes
// nothing, and commits it, in one transaction with the settlements that
// other runs asked for while a commit was in progress: under load one
// round trip to the broker settles many messages. The run that finds no
// commit in progress commits the waiting settlements, once, then hands the
// next group to one of its waiting runs. Grouping does not weaken what a
// transaction holds: each op is a whole settlement, and an op that fails
// (the channel is gone) fails the group, whose operations the closing
// channel discards anyway.
func (s *session) settle(op func() error) error {
	u := &settlement{op: op, done: make(chan error, 1)}
	s.settleMu.Lock()
	s.unsettled = append(s.unsettled, u)
	if s.settling {
		s.settleMu.Unlock()
		if err := <-u.done; err != errYourTurn {
			return err
		}
		s.settleMu.Lock()
	}
	s.settling = true
	group := s.unsettled
	s.unsettled = nil
	s.settleMu.Unlock()
	err := s.commit(func() error {
		for _, g := range group {
			if err := g.op(); err != nil {
				return err
			}
		}
		return nil
	})
	for _, g := range group {
		if g != u {
			g.done <- err
		}
	}
	s.settleMu.Lock()
	if len(s.unsettled) > 0 {
		s.unsettled[0].done <- errYourTurn
	} else {
		s.settling = false
	}
	s.settleMu.Unlock()
	return err
}

// ack acknowledges d. A failure means the connection is gone: the broker
// redelivers d, and the memory recognizes it.
func (s *session) ack(d *amqp.Delivery) {
	if err := s.settle(func() error { return d.Ack(false) }); err != nil {
		s.c.log.Warn("acknowledgement failed; the redelivery will be acknowledged without invoking", "message_id", d.MessageId, "error", err)
	}
}

// reject rejects d without requeueing it, so that the queue's dead-letter
// settings apply.
func (s *session) reject(d *amqp.Delivery) {
	if err := s.settle(func() error { return d.Nack(false, false) }); err != nil {
		s.c.log.Warn("rejection failed; the redelivery will be rejected without invoking", "message_id", d.MessageId, "error", err)
	}
}

// requeue returns d to the queue unsettled, for a later delivery: the
// session ends before d's outcome is known.
func (s *session) requeue(d *amqp.Delivery) {
	if err := s.settle(func() error { return d.Nack(false, true) }); err != nil {
		// The channel is gone, and with it the broker requeued d.
		s.c.log.Debug("requeue failed", "message_id", d.MessageId, "error", err)
	}
}

// truncate shortens s to at most n bytes, on a character boundary, marking
// the cut with "...".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
