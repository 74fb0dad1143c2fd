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
// session ends or the consumer stops before it is settled.
//
// The count of runs travels with the message: a failed run is followed by
// a retry copy that carries it (published to the queue with publisher
// confirms, and only then is the delivery acknowledged), so that neither a
// lost connection, a broker restart nor a sless restart starts the count
// again. The copy waits for its retry time unacknowledged, held by the
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
			// A run failed that the copy in hand does not count: its retry
			// copy could not be published.
			if m.history.runs > h.runs {
				h = m.history
			}
		}
	}
	if s.duplicateCopy(&d) {
		return
	}
	attempts := c.spec.maxRetries + 1
	for h.runs < attempts {
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
		if (h.runs < attempts || !s.hasDeadLetterTarget()) && s.republish(&d, key, h) {
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

// republish replaces d in its queue by its retry copy, carrying h: the
// copy is published through the default exchange, so that it reaches this
// queue only, and d is acknowledged once the broker confirmed the copy. A
// crash in between leaves both, and the message runs once more than it
// should; the other order could lose it. It reports whether d was
// replaced; when it was not (the connection is lost, or the broker refused
// the copy), the caller keeps d and retries it in place, and the memory
// holds the count for a redelivery.
func (s *session) republish(d *amqp.Delivery, key string, h history) bool {
	c := s.c
	// Replaced before the copy is out: a copy delivered at once must not
	// find its delivery kept (see duplicateCopy).
	c.memory.add(key, memo{outcome: replaced})
	if err := s.publish("", c.spec.queue, retryCopy(d, c.key, h, key)); err != nil {
		c.memory.add(key, memo{history: h})
		c.log.Warn("could not republish the message for its retry; retrying it in place", "message_id", d.MessageId, "error", c.scrub.scrub(err.Error()))
		return false
	}
	s.ack(d)
	return true
}

// duplicateCopy acknowledges d without invoking, and reports so, when d is
// a retry copy of a delivery this trigger kept instead: the copy's
// publication failed as far as the trigger could tell (its confirmation
// was lost with the connection) while the broker had it, and the delivery
// it was to replace runs on in place, or ran, counting the same runs.
// A copy whose delivery is not remembered (the server restarted, or it was
// forgotten) runs: a possible extra run rather than a lost one.
func (s *session) duplicateCopy(d *amqp.Delivery) bool {
	parent, ok := d.Headers[headerReplaces].(string)
	if !ok {
		return false
	}
	m, ok := s.c.memory.get(parent)
	if !ok || m.outcome == replaced {
		return false
	}
	s.c.log.Info("retry copy of a message that ran on in place; not invoking again", "message_id", d.MessageId)
	s.ack(d)
	s.c.report(triggers.EventSkipped, "a retry copy of a message that was retried in place: acknowledged without invoking")
	return true
}

// hasDeadLetterTarget reports whether the trigger publishes dead letters
// rather than rejecting them.
func (s *session) hasDeadLetterTarget() bool {
	return s.c.spec.deadLetterExchange != "" || s.c.spec.deadLetterQueue != ""
}

// deadLetter takes d out of the queue after the runs of h failed and no
// retry is left: published to the trigger's dead-letter exchange or queue
// and then acknowledged, or, with neither, rejected.
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
		err := s.publish(exchange, routingKey, msg)
		if err == nil {
			if n > 1 {
				c.ready()
			}
			break
		}
		c.fail(fmt.Errorf("dead-letter a message to %s: %w", target, err))
		if !sleep(s.ctx, c.r.cfg.retry.delay(n)) {
			s.requeue(d)
			return
		}
	}
	c.memory.add(key, memo{outcome: ack})
	s.ack(d)
	c.log.Warn("message dead-lettered", "message_id", d.MessageId, "attempts", h.runs, "reason", h.why, "to", target)
	c.report(triggers.EventDeadLettered, fmt.Sprintf("after %d attempts (%s): published to %s", h.runs, h.why, target))
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

// publish publishes msg (a retry copy or a dead letter) as mandatory and
// waits for the broker's confirmation. The broker sends the return of an unroutable message before
// its confirmation, so with one publish at a time a return found after the
// confirmation is this message's. It is part of the in-flight work that a
// stopping consumer lets finish, so only a Stop out of time interrupts it;
// a closing channel fails the confirmation anyway.
func (s *session) publish(exchange, routingKey string, msg amqp.Publishing) error {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	ctx := s.c.r.ctx
	confirm, err := s.pub.PublishWithDeferredConfirmWithContext(ctx, exchange, routingKey, true, false, msg)
	if err != nil {
		return err
	}
	acked, err := confirm.WaitContext(ctx)
	switch {
	case err != nil:
		return err
	case !acked:
		return errors.New("the broker did not confirm the message")
	}
	select {
	case ret, ok := <-s.returns:
		if !ok {
			// The channel closed after the confirmation: a return would
			// have come before it, so the message was routed. (A closed
			// channel yields zero Returns, which are no return at all.)
			return nil
		}
		return fmt.Errorf("no queue took the message: %d %s", ret.ReplyCode, ret.ReplyText)
	default:
		return nil
	}
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

// ack acknowledges d. A failure means the connection is gone: the broker
// redelivers d, and the settled set recognizes it.
func (s *session) ack(d *amqp.Delivery) {
	if err := d.Ack(false); err != nil {
		s.c.log.Warn("acknowledgement failed; the redelivery will be acknowledged without invoking", "message_id", d.MessageId, "error", err)
	}
}

// reject rejects d without requeueing it, so that the queue's dead-letter
// settings apply.
func (s *session) reject(d *amqp.Delivery) {
	if err := d.Nack(false, false); err != nil {
		s.c.log.Warn("rejection failed; the redelivery will be rejected without invoking", "message_id", d.MessageId, "error", err)
	}
}

// requeue returns d to the queue unsettled, for a later delivery: the
// session ends before d's outcome is known.
func (s *session) requeue(d *amqp.Delivery) {
	if err := d.Nack(false, true); err != nil {
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
