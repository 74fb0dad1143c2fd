package ledger

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestCodecTraceID: a row keeps its trace id through the journal, and a
// row a journal of the previous version holds decodes with none.
func TestCodecTraceID(t *testing.T) {
	r := row{ID: "0190a0b0-c0d0-7000-8000-000000000001", Namespace: "default", Function: "hello", TriggerKind: "http",
		Method: "POST", Path: "/", StartedAt: time.UnixMicro(1_800_000_000_000_000).UTC(), DurationMS: 1.5, StatusCode: 200,
		Logs: "hi\n", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
	got, err := decodeRow(appendRow(nil, &r))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	v1 := appendV1(&r)
	got, err = decodeRow(v1)
	if err != nil {
		t.Fatalf("a version 1 row: %v", err)
	}
	want := r
	want.TraceID = ""
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("version 1 row (-want +got):\n%s", diff)
	}
	if _, err := decodeRow(append(v1, 0)); err == nil {
		t.Errorf("a version 1 row with a byte too many decoded")
	}
}

// appendV1 encodes r as version 1 of the codec did, without a trace id.
func appendV1(r *row) []byte {
	b := []byte{codecVersionV1}
	for _, s := range [...]string{r.ID, r.Namespace, r.Function, r.TriggerKind, r.TriggerName, r.Method, r.Path} {
		b = appendString(b, s)
	}
	b = binary.AppendVarint(b, r.StartedAt.UnixMicro())
	for _, f := range [...]float64{r.DurationMS, r.QueueMS, r.ColdStartMS, r.HandlerMS} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	b = append(b, 0)
	b = binary.AppendVarint(b, int64(r.StatusCode))
	b = binary.AppendVarint(b, r.RequestBytes)
	b = binary.AppendVarint(b, r.ResponseBytes)
	b = appendString(b, r.Error)
	return appendString(b, r.Logs)
}
