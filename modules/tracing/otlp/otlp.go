// Package otlp exports spans to an OpenTelemetry collector (or any OTLP
// backend: Jaeger, Tempo, ...) over OTLP/HTTP with protobuf bodies. Spans
// wait in a bounded queue and go in batches from one goroutine; when the
// backend is slow or down the queue fills and new spans are dropped and
// counted, so that tracing never slows an invocation.
package otlp

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"sless.kube5s.ru/sless/modules/tracing"
)

// Config configures the exporter.
type Config struct {
	// URL is the OTLP/HTTP traces endpoint, with its path:
	// http://collector:4318/v1/traces. Required.
	URL string
	// Headers are sent with every export (an API key of the backend).
	Headers map[string]string
	// SampleRatio is the share of new traces exported, 0 to 1; a trace that
	// came with a traceparent follows its sampled flag.
	SampleRatio float64
	// Service is the service.name of the spans; default "sless".
	Service string
}

// Bounds of the queue and of one export.
const (
	queueSpans    = 8192
	batchSpans    = 512
	flushInterval = time.Second
	exportTimeout = 10 * time.Second
)

// Exporter implements tracing.Exporter.
type Exporter struct {
	client    otlptrace.Client
	log       *slog.Logger
	threshold uint64
	resource  *resourcepb.Resource
	queue     chan tracing.Span
	stop      chan struct{}
	done      chan struct{}
	// failing is set while exports fail, so that a failure is logged when
	// it starts and when it ends, not for every batch.
	failing atomic.Bool

	exported, dropped, failures prometheus.Counter
}

var _ tracing.Exporter = (*Exporter)(nil)

// New returns a stopped exporter whose series are registered on reg.
func New(cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Exporter, error) {
	if cfg.Service == "" {
		cfg.Service = "sless"
	}
	if cfg.SampleRatio < 0 || cfg.SampleRatio > 1 || math.IsNaN(cfg.SampleRatio) {
		return nil, fmt.Errorf("the sample ratio %v is not between 0 and 1", cfg.SampleRatio)
	}
	host, _ := os.Hostname()
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(cfg.URL), otlptracehttp.WithTimeout(exportTimeout),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{
			Enabled: true, InitialInterval: time.Second, MaxInterval: 5 * time.Second, MaxElapsedTime: 30 * time.Second})}
	if len(cfg.Headers) > 0 {
		// Only then: the option would replace OTEL_EXPORTER_OTLP_HEADERS.
		opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
	}
	e := &Exporter{
		client: otlptracehttp.NewClient(opts...),
		log:    log,
		// As OpenTelemetry's TraceIDRatioBased: the trace id's last 8
		// bytes, shifted right once, compared with ratio * 2^63.
		threshold: uint64(cfg.SampleRatio * (1 << 63)),
		resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
			stringKV("service.name", cfg.Service), stringKV("service.instance.id", host)}},
		queue: make(chan tracing.Span, queueSpans),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		exported: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_trace_spans_exported_total",
			Help: "Spans the OTLP backend accepted."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_trace_spans_dropped_total",
			Help: "Spans dropped because the export queue was full or the OTLP backend refused them."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "sless_trace_export_failures_total",
			Help: "Exports of a batch of spans that failed after their retries."}),
	}
	if cfg.SampleRatio == 1 {
		e.threshold = math.MaxUint64
	}
	for _, c := range []prometheus.Collector{e.exported, e.dropped, e.failures} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Start starts exporting.
func (e *Exporter) Start(ctx context.Context) error {
	if err := e.client.Start(ctx); err != nil {
		return fmt.Errorf("starting the OTLP trace exporter: %w", err)
	}
	go e.loop()
	return nil
}

// Stop exports what is queued, until ctx ends, and stops.
func (e *Exporter) Stop(ctx context.Context) error {
	close(e.stop)
	select {
	case <-e.done:
	case <-ctx.Done():
	}
	return e.client.Stop(ctx)
}

// Sampled implements tracing.Exporter.
func (e *Exporter) Sampled(id tracing.TraceID) bool {
	return binary.BigEndian.Uint64(id[8:])>>1 < e.threshold
}

// Export implements tracing.Exporter.
func (e *Exporter) Export(spans ...tracing.Span) {
	for _, s := range spans {
		select {
		case e.queue <- s:
		default:
			e.dropped.Inc()
		}
	}
}

func (e *Exporter) loop() {
	defer close(e.done)
	tick := time.NewTicker(flushInterval)
	defer tick.Stop()
	batch := make([]tracing.Span, 0, batchSpans)
	for {
		select {
		case s := <-e.queue:
			if batch = append(batch, s); len(batch) == batchSpans {
				batch = e.flush(batch)
			}
		case <-tick.C:
			batch = e.flush(batch)
		case <-e.stop:
			for {
				select {
				case s := <-e.queue:
					if batch = append(batch, s); len(batch) == batchSpans {
						batch = e.flush(batch)
					}
				default:
					e.flush(batch)
					return
				}
			}
		}
	}
}

// flush exports batch and returns it emptied.
func (e *Exporter) flush(batch []tracing.Span) []tracing.Span {
	if len(batch) == 0 {
		return batch
	}
	ctx, cancel := context.WithTimeout(context.Background(), exportTimeout+30*time.Second)
	defer cancel()
	err := e.client.UploadTraces(ctx, []*tracepb.ResourceSpans{{Resource: e.resource,
		ScopeSpans: []*tracepb.ScopeSpans{{Scope: &commonpb.InstrumentationScope{Name: "sless"}, Spans: toProto(batch)}}}})
	switch {
	case err != nil:
		e.failures.Inc()
		e.dropped.Add(float64(len(batch)))
		if !e.failing.Swap(true) {
			e.log.Error("exporting spans failed; dropping them until the OTLP backend takes them again", "spans", len(batch), "error", err)
		}
	default:
		e.exported.Add(float64(len(batch)))
		if e.failing.Swap(false) {
			e.log.Info("exporting spans works again")
		}
	}
	clear(batch)
	return batch[:0]
}

// toProto converts spans to OTLP's messages.
func toProto(spans []tracing.Span) []*tracepb.Span {
	out := make([]*tracepb.Span, len(spans))
	for i := range spans {
		s := &spans[i]
		p := &tracepb.Span{
			TraceId: append([]byte(nil), s.TraceID[:]...), SpanId: append([]byte(nil), s.SpanID[:]...),
			Name: s.Name, Kind: tracepb.Span_SPAN_KIND_INTERNAL,
			StartTimeUnixNano: uint64(s.Start.UnixNano()), EndTimeUnixNano: uint64(s.End.UnixNano()),
		}
		if s.Parent != (tracing.SpanID{}) {
			p.ParentSpanId = append([]byte(nil), s.Parent[:]...)
		}
		if s.Kind == tracing.KindServer {
			p.Kind = tracepb.Span_SPAN_KIND_SERVER
		}
		for _, a := range s.Attributes {
			if a.IsInt {
				p.Attributes = append(p.Attributes, &commonpb.KeyValue{Key: a.Key, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: a.Int}}})
			} else {
				p.Attributes = append(p.Attributes, stringKV(a.Key, a.Str))
			}
		}
		if s.Error != "" {
			p.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: s.Error}
		}
		out[i] = p
	}
	return out
}

func stringKV(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}
