// Package buildtrace makes a span of every build: a build.Observer that
// hands each build's span to a tracing.Exporter. A build starts a trace of
// its own (it is the reconciler's work, not a request's).
package buildtrace

import (
	"crypto/rand"
	"time"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/buildmetrics"
	"sless.kube5s.ru/sless/modules/tracing"
)

// Observer implements build.Observer.
type Observer struct {
	exporter tracing.Exporter
}

var _ build.Observer = Observer{}

// New returns the observer that exports builds' spans to e.
func New(e tracing.Exporter) Observer { return Observer{exporter: e} }

// BuildEnded implements build.Observer.
func (o Observer) BuildEnded(req build.Request, start time.Time, took time.Duration, res build.Result, err error) {
	var s tracing.Span
	rand.Read(s.TraceID[:])
	if !o.exporter.Sampled(s.TraceID) {
		return
	}
	rand.Read(s.SpanID[:])
	s.Name, s.Start, s.End = "build "+req.Namespace+"/"+req.Function, start, start.Add(took)
	s.Attributes = []tracing.Attribute{
		tracing.String("sless.namespace", req.Namespace), tracing.String("sless.function", req.Function),
		tracing.String("sless.runtime", req.Runtime), tracing.String("sless.code_sha256", req.CodeSHA256),
		tracing.String("sless.build.result", buildmetrics.Result(res, err)),
	}
	if err != nil {
		s.Error = err.Error()
	}
	o.exporter.Export(s)
}

// Forget implements build.Observer: spans keep nothing per function.
func (Observer) Forget(string, string) {}
