package app

import (
	"log/slog"

	"go.uber.org/fx/fxevent"
)

// newFxLogger returns the logger of fx's own events: at debug level, except
// failures (error level), and without the stack and module traces that fx
// attaches to every supplied, provided, replaced and decorated constructor,
// which turned --log-level debug into screens of frames per constructor.
func newFxLogger(log *slog.Logger) fxevent.Logger {
	l := &fxevent.SlogLogger{Logger: log.With("module", "fx")}
	l.UseLogLevel(slog.LevelDebug)
	return fxLogger{l}
}

type fxLogger struct{ next fxevent.Logger }

func (l fxLogger) LogEvent(event fxevent.Event) {
	switch e := event.(type) {
	case *fxevent.Supplied:
		c := *e
		c.StackTrace, c.ModuleTrace = nil, nil
		event = &c
	case *fxevent.Provided:
		c := *e
		c.StackTrace, c.ModuleTrace = nil, nil
		event = &c
	case *fxevent.Replaced:
		c := *e
		c.StackTrace, c.ModuleTrace = nil, nil
		event = &c
	case *fxevent.Decorated:
		c := *e
		c.StackTrace, c.ModuleTrace = nil, nil
		event = &c
	}
	l.next.LogEvent(event)
}
