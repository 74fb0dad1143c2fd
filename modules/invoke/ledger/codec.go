package ledger

import (
	"encoding/binary"
	"errors"
	"math"
	"time"
)

// A row in the journal is a version byte, then its fields in the order of
// the row struct: strings as a uvarint length and the bytes, floats as 8
// bytes, integers as varints, the start time as Unix microseconds. It is a
// tenth of the cost of JSON, and the journal's CRC guards it. Version 2
// adds the trace id after the logs; version 1 rows, which a journal written
// before may hold, decode with none.
const (
	codecVersion   = 2
	codecVersionV1 = 1
)

var errBadRecord = errors.New("an invocation record in the journal cannot be decoded")

// appendRow appends r's encoding to b.
func appendRow(b []byte, r *row) []byte {
	b = append(b, codecVersion)
	for _, s := range [...]string{r.ID, r.Namespace, r.Function, r.TriggerKind, r.TriggerName, r.Method, r.Path} {
		b = appendString(b, s)
	}
	b = binary.AppendVarint(b, r.StartedAt.UnixMicro())
	for _, f := range [...]float64{r.DurationMS, r.QueueMS, r.ColdStartMS, r.HandlerMS} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	cold := byte(0)
	if r.ColdStart {
		cold = 1
	}
	b = append(b, cold)
	b = binary.AppendVarint(b, int64(r.StatusCode))
	b = binary.AppendVarint(b, r.RequestBytes)
	b = binary.AppendVarint(b, r.ResponseBytes)
	b = appendString(b, r.Error)
	b = appendString(b, r.Logs)
	return appendString(b, r.TraceID)
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// decoder reads the fields of one encoded row; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) string() string {
	n, k := binary.Uvarint(d.b)
	if k <= 0 || uint64(len(d.b)-k) < n {
		d.err = errBadRecord
		return ""
	}
	s := string(d.b[k : k+int(n)])
	d.b = d.b[k+int(n):]
	return s
}

func (d *decoder) varint() int64 {
	v, k := binary.Varint(d.b)
	if k <= 0 {
		d.err = errBadRecord
		return 0
	}
	d.b = d.b[k:]
	return v
}

func (d *decoder) float() float64 {
	if len(d.b) < 8 {
		d.err = errBadRecord
		return 0
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return f
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.err = errBadRecord
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

// decodeRow decodes what appendRow encoded.
func decodeRow(b []byte) (row, error) {
	d := decoder{b: b}
	version := d.byte()
	if version != codecVersion && version != codecVersionV1 {
		return row{}, errBadRecord
	}
	var r row
	for _, s := range [...]*string{&r.ID, &r.Namespace, &r.Function, &r.TriggerKind, &r.TriggerName, &r.Method, &r.Path} {
		*s = d.string()
	}
	r.StartedAt = time.UnixMicro(d.varint()).UTC()
	for _, f := range [...]*float64{&r.DurationMS, &r.QueueMS, &r.ColdStartMS, &r.HandlerMS} {
		*f = d.float()
	}
	r.ColdStart = d.byte() == 1
	r.StatusCode = int(d.varint())
	r.RequestBytes = d.varint()
	r.ResponseBytes = d.varint()
	r.Error = d.string()
	r.Logs = d.string()
	if version == codecVersion {
		r.TraceID = d.string()
	}
	if d.err != nil || len(d.b) != 0 {
		return row{}, errBadRecord
	}
	return r, nil
}
