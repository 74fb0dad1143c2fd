package rabbitmq

import (
	"maps"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.kube5s.ru/sless/modules/triggers"
)

// The headers that the trigger sets on the copies it publishes: the retry
// copy of a message whose run failed, and the dead letter.
const (
	// headerAttempts counts the runs of the message that failed.
	headerAttempts = "x-sless-attempts"
	// headerError says why the last run failed.
	headerError = "x-sless-error"
	// headerRetryAt marks a retry copy: when its next run may start, in
	// milliseconds since the Unix epoch. A dead letter has none, so that
	// publishing it to the queue again runs it afresh.
	headerRetryAt = "x-sless-retry-at"
	// headerTrigger names the trigger, as namespace/name.
	headerTrigger = "x-sless-trigger"
	// headerExchange and headerRoutingKey are where the message was first
	// published: a retry copy goes through the default exchange.
	headerExchange   = "x-sless-original-exchange"
	headerRoutingKey = "x-sless-original-routing-key"
)

// history is what a delivery says of its message's earlier runs. A message
// as its publisher sent it has none; a retry copy carries them in its
// headers, so that the count survives a lost connection, a broker restart
// and a sless restart.
type history struct {
	// runs is how many runs failed, why the last did, and when the next
	// may start.
	runs    int
	why     string
	retryAt time.Time
	// exchange and routingKey are where the message was first published.
	exchange, routingKey string
}

// historyOf reads d's history. Headers a retry copy would not have (a
// count that is no integer, a missing origin) are taken as a message's
// first publication would give them.
func historyOf(d *amqp.Delivery) history {
	h := history{exchange: d.Exchange, routingKey: d.RoutingKey}
	at, ok := intHeader(d.Headers, headerRetryAt)
	if !ok {
		return h
	}
	runs, _ := intHeader(d.Headers, headerAttempts)
	h.runs = int(max(runs, 0))
	h.retryAt = time.UnixMilli(at)
	h.why, _ = d.Headers[headerError].(string)
	if x, ok := d.Headers[headerExchange].(string); ok {
		h.exchange = x
	}
	if k, ok := d.Headers[headerRoutingKey].(string); ok {
		h.routingKey = k
	}
	return h
}

// failed returns h after one more run failed for why; the next may start
// after delay.
func (h history) failed(why string, delay time.Duration) history {
	h.runs++
	h.why = why
	h.retryAt = time.Now().Add(delay)
	return h
}

// intHeader returns the header name of t as an integer, of whichever
// integer type the publisher encoded it with.
func intHeader(t amqp.Table, name string) (int64, bool) {
	switch v := t[name].(type) {
	case int8:
		return int64(v), true
	case uint8:
		return int64(v), true
	case int16:
		return int64(v), true
	case uint16:
		return int64(v), true
	case int32:
		return int64(v), true
	case uint32:
		return int64(v), true
	case int64:
		return v, true
	case int:
		return int64(v), true
	}
	return 0, false
}

// retryCopy is the copy of d that replaces it in its queue after a failed
// run, carrying h.
func retryCopy(d *amqp.Delivery, key triggers.Key, h history) amqp.Publishing {
	msg := republished(d, key, h)
	msg.Headers[headerRetryAt] = h.retryAt.UnixMilli()
	return msg
}

// deadLetterMessage is d as it is dead-lettered after the runs of h.
func deadLetterMessage(d *amqp.Delivery, key triggers.Key, h history) amqp.Publishing {
	msg := republished(d, key, h)
	delete(msg.Headers, headerRetryAt)
	return msg
}

// republished is d as the trigger publishes it again: its body and
// properties, and headers saying how its runs went. The expiration and the
// user id are left out: a TTL would expire the copy, and the broker refuses
// a user id other than the publishing connection's.
func republished(d *amqp.Delivery, key triggers.Key, h history) amqp.Publishing {
	headers := make(amqp.Table, len(d.Headers)+6)
	maps.Copy(headers, d.Headers)
	headers[headerError] = h.why
	headers[headerAttempts] = int32(h.runs)
	headers[headerTrigger] = key.String()
	headers[headerExchange] = h.exchange
	headers[headerRoutingKey] = h.routingKey
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
