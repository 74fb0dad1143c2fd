package proxy

import (
	"strconv"
	"time"

	"github.com/google/uuid"

	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/tracing"
)

// The spans of an invocation, children of its own span; their ids are its
// id with the first byte changed, so that the handler's is known before
// the handler runs (it is the parent the handler sees in traceparent).
const (
	spanQueue   byte = 1
	spanCold    byte = 2
	spanHandler byte = 3
)

// invocationSpan is the span of an invocation and the caller's span it
// continues (zero when the invocation starts a trace).
type invocationSpan struct {
	tracing.Context
	parent tracing.SpanID
}

// childID returns the id of the invocation's child span n.
func (s *invocationSpan) childID(n byte) tracing.SpanID {
	id := s.SpanID
	id[0] ^= n
	return id
}

// startSpan returns the span of the invocation with id u: in the trace of
// the request's traceparent when it has a valid one, else in a new trace
// whose id is the invocation's (a UUIDv7's last 62 bits are random, as W3C
// asks of a trace id's right part). The invocation's span id is u's last 8
// bytes.
func (p *Proxy) startSpan(c *call, u uuid.UUID) invocationSpan {
	var s invocationSpan
	copy(s.SpanID[:], u[8:])
	if vv := c.r.Header["Traceparent"]; len(vv) == 1 {
		if in, ok := tracing.Parse(vv[0]); ok {
			s.TraceID, s.Flags, s.parent = in.TraceID, in.Flags, in.SpanID
			return s
		}
	}
	s.TraceID = tracing.TraceID(u)
	if p.tracer != nil && p.tracer.Sampled(s.TraceID) {
		s.Flags = tracing.FlagSampled
	}
	return s
}

// handlerTraceparent is the traceparent the handler gets: the invocation's
// trace, with the handler's span as the parent of what it calls.
func (s *invocationSpan) handlerTraceparent() string {
	hc := s.Context
	hc.SpanID = s.childID(spanHandler)
	var b [tracing.TraceparentLen]byte
	return string(hc.AppendTraceparent(b[:0]))
}

// exportSpans hands the spans of a finished invocation to the exporter:
// the invocation's own, and its queue, cold start and handler phases, laid
// one after the other from its start.
func (p *Proxy) exportSpans(s *invocationSpan, c *call, rec *invoke.Record, start time.Time, took time.Duration) {
	end := start.Add(took)
	failed := ""
	if o := c.refusal; o != outcomeNone || rec.StatusCode >= 500 {
		failed = rec.Error
		if failed == "" {
			failed = "status " + strconv.Itoa(rec.StatusCode)
		}
	}
	attrs := []tracing.Attribute{
		tracing.String("sless.namespace", c.ns), tracing.String("sless.function", c.name),
		tracing.String("sless.invocation_id", rec.ID), tracing.String("sless.trigger_kind", c.kind),
		tracing.String("http.request.method", rec.Method), tracing.Int("http.response.status_code", int64(rec.StatusCode)),
	}
	if rec.ColdStart {
		attrs = append(attrs, tracing.String("sless.cold_start", "true"))
	}
	spans := make([]tracing.Span, 1, 4)
	spans[0] = tracing.Span{Name: "invoke " + c.ns + "/" + c.name, TraceID: s.TraceID, SpanID: s.SpanID, Parent: s.parent,
		Kind: tracing.KindServer, Start: start, End: end, Attributes: attrs, Error: failed}
	child := func(name string, n byte, from time.Time, ms float64) time.Time {
		to := from.Add(time.Duration(ms * float64(time.Millisecond)))
		spans = append(spans, tracing.Span{Name: name, TraceID: s.TraceID, SpanID: s.childID(n), Parent: s.SpanID,
			Start: from, End: to})
		return to
	}
	if c.leased {
		at := child("queue", spanQueue, start, rec.QueueMS)
		if rec.ColdStart {
			at = child("cold start", spanCold, at, rec.ColdStartMS)
		}
		if c.refusal == outcomeNone {
			child("handler", spanHandler, at, rec.HandlerMS)
		}
	}
	p.tracer.Export(spans...)
}
