// Package tracing is the contract of traces: the W3C trace context that
// /fn accepts in traceparent and passes to handlers, and the spans that
// modules hand to an Exporter (OTLP, off unless configured).
package tracing

import (
	"encoding/hex"
	"time"
)

// TraceID and SpanID are W3C trace and span ids.
type (
	TraceID [16]byte
	SpanID  [8]byte
)

// FlagSampled is the sampled bit of the trace flags.
const FlagSampled byte = 1

// Context is a W3C trace context: a trace, a span in it, and flags.
type Context struct {
	TraceID TraceID
	SpanID  SpanID
	Flags   byte
}

// TraceparentLen is the length of a version 00 traceparent value.
const TraceparentLen = 55

// Parse parses a traceparent header value. A version other than 00 is read
// as 00 (as the W3C recommendation asks), ignoring what follows; ok is false
// for an invalid value: wrong length or separators, upper-case or non-hex
// digits, version ff, or an all-zero trace or span id.
func Parse(s string) (c Context, ok bool) {
	if len(s) < TraceparentLen || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return Context{}, false
	}
	var version [1]byte
	if !decodeHex(version[:], s[0:2]) || version[0] == 0xff || (version[0] == 0 && len(s) != TraceparentLen) ||
		(len(s) > TraceparentLen && s[TraceparentLen] != '-') {
		return Context{}, false
	}
	var flags [1]byte
	if !decodeHex(c.TraceID[:], s[3:35]) || !decodeHex(c.SpanID[:], s[36:52]) || !decodeHex(flags[:], s[53:55]) ||
		c.TraceID == (TraceID{}) || c.SpanID == (SpanID{}) {
		return Context{}, false
	}
	c.Flags = flags[0]
	return c, true
}

// decodeHex decodes lower-case hex digits only, as traceparent requires,
// into dst, which s fills exactly.
func decodeHex(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, ok1 := nibble(s[2*i])
		lo, ok2 := nibble(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func nibble(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// Sampled reports the sampled flag.
func (c Context) Sampled() bool { return c.Flags&FlagSampled != 0 }

// AppendTraceparent appends c as a version 00 traceparent value.
func (c Context) AppendTraceparent(b []byte) []byte {
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, c.TraceID[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, c.SpanID[:])
	b = append(b, '-')
	return hex.AppendEncode(b, []byte{c.Flags})
}

// String returns c as a traceparent value.
func (c Context) String() string { return string(c.AppendTraceparent(make([]byte, 0, TraceparentLen))) }

// String returns the id in hex.
func (id TraceID) String() string { return hex.EncodeToString(id[:]) }

// String returns the id in hex.
func (id SpanID) String() string { return hex.EncodeToString(id[:]) }

// Kind is what a span stands for, as OTLP's SpanKind.
type Kind int

// The span kinds used.
const (
	KindInternal Kind = iota
	// KindServer: the span of a request that a client made (an invocation).
	KindServer
)

// Attribute is a string or integer attribute of a span.
type Attribute struct {
	Key string
	// Str is the value unless IsInt; then Int is.
	Str   string
	Int   int64
	IsInt bool
}

// String returns a string attribute.
func String(key, value string) Attribute { return Attribute{Key: key, Str: value} }

// Int returns an integer attribute.
func Int(key string, value int64) Attribute { return Attribute{Key: key, Int: value, IsInt: true} }

// Span is one finished operation.
type Span struct {
	Name    string
	TraceID TraceID
	SpanID  SpanID
	// Parent is the parent span's id, zero for a root span.
	Parent     SpanID
	Kind       Kind
	Start, End time.Time
	Attributes []Attribute
	// Error, when set, marks the span failed with this message.
	Error string
}

// Exporter sends finished spans to a tracing backend in the background.
// Implementations are safe for concurrent use.
type Exporter interface {
	// Sampled reports whether a new trace with this id is exported (a
	// deterministic function of the id, so that every replica decides
	// alike); a trace that came with a traceparent follows its sampled
	// flag instead.
	Sampled(id TraceID) bool
	// Export queues spans and returns at once; when the queue is full the
	// spans are dropped and counted.
	Export(spans ...Span)
}
