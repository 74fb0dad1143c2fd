package rabbitmq

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/triggers"
)

// maxReasonLen bounds why an invocation failed as events and the
// x-sless-error header carry it: a handler's error can be long.
const maxReasonLen = 256

// handle runs one delivery to its outcome: acknowledged after a 2xx answer,
// dead-lettered or rejected once the retries are spent, or requeued when
// the session ends or the consumer stops between two attempts.
func (s *session) handle(d amqp.Delivery) {
	defer s.handlers.Done()
	c := s.c
	key, check := settledKey(&d)
	if check {
		if outcome, ok := c.settled.get(key); ok {
			s.settleAgain(&d, outcome)
			return
		}
	}
	attempts := c.spec.maxRetries + 1
	var why string
	for n := 1; n <= attempts; n++ {
		if n > 1 && !sleep(s.ctx, c.r.cfg.retry.delay(n-1)) {
			s.requeue(&d)
			return
		}
		if why = s.attempt(&d, n); why == "" {
			c.settled.add(key, ack)
			s.ack(&d)
			return
		}
	}
	s.deadLetter(&d, key, why, attempts)
}

// attempt invokes the function once for d and reports it. It returns why
// the attempt failed, or "" when it succeeded.
func (s *session) attempt(d *amqp.Delivery, n int) string {
	c := s.c
	c.report(triggers.EventFired, "")
	resp, err := c.r.inv.Invoke(c.r.ctx, c.request(d, n))
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
	c.log.Info("invocation failed", "message_id", d.MessageId, "attempt", n, "reason", why)
	c.report(triggers.EventFailed, fmt.Sprintf("attempt %d of %d: %s", n, c.spec.maxRetries+1, why))
	return why
}

// request is the invocation of d's n-th attempt.
func (c *consumer) request(d *amqp.Delivery, n int) invoke.Request {
	return invoke.Request{
		Namespace:   c.key.Namespace,
		Function:    c.spec.function,
		Method:      http.MethodPost,
		Header:      http.Header{"Content-Type": {cmp.Or(d.ContentType, "application/json")}},
		Body:        d.Body,
		TriggerKind: invoke.KindRabbitMQ,
		TriggerName: c.key.Name,
		TriggerMeta: map[string]any{"message": messageMeta(d, c.spec.queue, n)},
	}
}

// deadLetter takes d out of the queue after its last attempt failed:
// published to the trigger's dead-letter exchange or queue and then
// acknowledged, or, with neither, rejected.
func (s *session) deadLetter(d *amqp.Delivery, key string, why string, attempts int) {
	c := s.c
	if s.pub == nil {
		c.settled.add(key, reject)
		s.reject(d)
		c.report(triggers.EventDeadLettered, fmt.Sprintf("rejected after %d attempts (%s); the queue's own dead-letter settings apply", attempts, why))
		return
	}
	exchange, routingKey, target := s.deadLetterTarget(d)
	msg := deadLetterMessage(d, c.key, why, attempts)
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
	c.settled.add(key, ack)
	s.ack(d)
	c.log.Warn("message dead-lettered", "message_id", d.MessageId, "attempts", attempts, "reason", why, "to", target)
	c.report(triggers.EventDeadLettered, fmt.Sprintf("after %d attempts (%s): published to %s", attempts, why, target))
}

// deadLetterTarget returns where dead letters go: the dead-letter exchange
// with the message's routing key when there is one, else the dead-letter
// queue through the default exchange; and how to name that in messages.
func (s *session) deadLetterTarget(d *amqp.Delivery) (exchange, routingKey, target string) {
	if x := s.c.spec.deadLetterExchange; x != "" {
		return x, d.RoutingKey, fmt.Sprintf("exchange %q", x)
	}
	q := s.c.spec.deadLetterQueue
	return "", q, fmt.Sprintf("queue %q", q)
}

// deadLetterMessage is d as it is dead-lettered: its body and properties,
// and headers saying why. The expiration and the user id are left out: a
// TTL would expire the dead letter, and the broker refuses a user id other
// than the publishing connection's.
func deadLetterMessage(d *amqp.Delivery, key triggers.Key, why string, attempts int) amqp.Publishing {
	headers := make(amqp.Table, len(d.Headers)+4)
	maps.Copy(headers, d.Headers)
	headers["x-sless-error"] = why
	headers["x-sless-attempts"] = int32(attempts)
	headers["x-sless-trigger"] = key.String()
	headers["x-sless-original-routing-key"] = d.RoutingKey
	return amqp.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}

// publish publishes msg as mandatory and waits for the broker's
// confirmation. The broker sends the return of an unroutable message before
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
	case ret := <-s.returns:
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
