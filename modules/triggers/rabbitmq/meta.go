package rabbitmq

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// messageMeta is the message's metadata as the handler sees it in
// context.trigger.message, for the run after those of h: where the message
// was first published, whichever copy of it this is.
func messageMeta(d *amqp.Delivery, queue string, h history) map[string]any {
	var timestamp any // null when the publisher set none
	if !d.Timestamp.IsZero() {
		timestamp = d.Timestamp.UTC().Format(time.RFC3339)
	}
	return map[string]any{
		"message_id":     d.MessageId,
		"correlation_id": d.CorrelationId,
		"routing_key":    h.routingKey,
		"exchange":       h.exchange,
		"queue":          queue,
		"redelivered":    d.Redelivered,
		"content_type":   d.ContentType,
		"timestamp":      timestamp,
		"headers":        jsonTable(d.Headers),
		"attempt":        h.runs + 1,
	}
}

// jsonTable converts an AMQP table to a map that encoding/json encodes;
// a missing table is an empty map, so that handlers need not check.
func jsonTable(t amqp.Table) map[string]any {
	m := make(map[string]any, len(t))
	for k, v := range t {
		m[k] = jsonValue(v)
	}
	return m
}

// jsonValue converts an AMQP field value to one that encoding/json encodes
// as a handler would expect it.
func jsonValue(v any) any {
	switch v := v.(type) {
	case amqp.Table:
		return jsonTable(v)
	case []any:
		a := make([]any, len(v))
		for i, x := range v {
			a[i] = jsonValue(x)
		}
		return a
	case []byte:
		// Byte arrays are mostly text; JSON would show them as base64.
		if utf8.Valid(v) {
			return string(v)
		}
		return v
	case amqp.Decimal:
		return float64(v.Value) / math.Pow10(int(v.Scale))
	case time.Time:
		return v.UTC().Format(time.RFC3339)
	case float32:
		return jsonFloat(float64(v))
	case float64:
		return jsonFloat(v)
	default: // nil, bool, integers, string
		return v
	}
}

// jsonFloat spells NaN and the infinities, which JSON has no numbers for,
// as strings.
func jsonFloat(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return f
}

// settledKey returns the key under which what happened to d is
// remembered, and whether d is looked up under it. A message with a
// message_id is named by it and by runs, the failed runs its copy counts:
// its retry copies have the same id, and each must run. It is always looked
// up. One without an id is named by its content, headers included, which
// differ from copy to copy; it is looked up when it is redelivered or a
// retry copy, since a new message equal to an earlier one is legitimate.
func settledKey(d *amqp.Delivery, runs int) (key string, check bool) {
	if d.MessageId != "" {
		// The count first, ended by a colon, cannot be confused with the id.
		return "id:" + strconv.Itoa(runs) + ":" + d.MessageId, true
	}
	h := sha256.New()
	for _, part := range []string{d.Exchange, d.RoutingKey} {
		h.Write([]byte(strconv.Itoa(len(part)) + ":" + part))
	}
	// Encoding cannot fail: jsonTable leaves only JSON values, and maps
	// are encoded with sorted keys, so equal headers hash equally.
	headers, _ := json.Marshal(jsonTable(d.Headers))
	h.Write([]byte(strconv.Itoa(len(headers)) + ":"))
	h.Write(headers)
	h.Write(d.Body)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), d.Redelivered || runs > 0
}
