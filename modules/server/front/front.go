// Package front is the server's HTTP/1.1 front. It accepts the connections
// of the server's one listener and serves the requests of fast routes
// (httpx.FastRoute: /fn) on a connection loop of its own; a connection whose
// request it does not serve goes, with the bytes read from it so far, to a
// net/http server, which serves it from then on, the API and /fn alike.
//
// net/http costs /fn more than the function's own wrapper does on this kind
// of machine: after each request without a body it starts a read on the
// client connection in a new goroutine, to notice the client going away,
// and aborts it when the handler returns, a system call and two goroutine
// wake-ups per request. The front starts that read only when a handler waits
// on the request's context (Done), which /fn does only when it queues for an
// instance. It serves only the requests whose head is well-formed and
// ordinary (HTTP/1.1, a Host, a Content-Length or a chunked body, no
// Expect but 100-continue, a head that fits its buffer); net/http answers
// every other one as it always did, errors included.
package front

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"sless.kube5s.ru/sless/modules/server/httpx"
)

// Config configures the front.
type Config struct {
	// Routes are the routes the front serves itself.
	Routes []httpx.FastRoute
	// Fallback serves every connection the front hands over; its Handler
	// must answer the fast routes' paths too. Its ReadHeaderTimeout and
	// IdleTimeout apply to the front's connections as well.
	Fallback *http.Server
	// Observe, when set, is called after each request the front answered,
	// with the route's pattern, the method, the status and the duration.
	Observe func(route, method string, code int, d time.Duration)
	Log     *slog.Logger
}

// Front serves a listener; see the package comment.
type Front struct {
	cfg      Config
	fallback *connListener

	mu       sync.Mutex
	conns    map[*conn]struct{}
	closing  bool
	listener net.Listener
	drained  chan struct{} // closed when closing and no conn is left
}

// New returns a front that serves nothing until Serve.
func New(cfg Config) *Front {
	return &Front{cfg: cfg, conns: map[*conn]struct{}{}}
}

// Serve accepts connections on ln until Shutdown, and runs the fallback
// server on the connections handed over. It returns http.ErrServerClosed
// after Shutdown, or the error that stopped accepting.
func (f *Front) Serve(ln net.Listener) error {
	f.mu.Lock()
	if f.closing {
		f.mu.Unlock()
		return http.ErrServerClosed
	}
	f.listener = ln
	f.fallback = newConnListener(ln.Addr())
	f.mu.Unlock()
	go func() {
		if err := f.cfg.Fallback.Serve(f.fallback); err != nil && !errors.Is(err, http.ErrServerClosed) {
			f.cfg.Log.Error("http server stopped", "error", err)
		}
	}()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			f.mu.Lock()
			closing := f.closing
			f.mu.Unlock()
			if closing {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) {
				// As net/http: wait for descriptors to free up.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				f.cfg.Log.Debug("accepting a connection failed; retrying", "error", err, "delay", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		cn := newConn(f, c)
		if !f.track(cn) {
			c.Close()
			continue
		}
		go cn.serve()
	}
}

// Shutdown stops accepting, closes the idle connections and waits, until
// ctx ends, for the requests in flight on the front and on the fallback
// server to be answered.
func (f *Front) Shutdown(ctx context.Context) error {
	f.mu.Lock()
	if !f.closing {
		f.closing = true
		f.drained = make(chan struct{})
		if f.listener != nil {
			f.listener.Close()
		}
		for cn := range f.conns {
			cn.closeIfIdleLocked()
		}
		if len(f.conns) == 0 {
			close(f.drained)
		}
	}
	drained := f.drained
	f.mu.Unlock()
	fallbackErr := make(chan error, 1)
	go func() { fallbackErr <- f.cfg.Fallback.Shutdown(ctx) }()
	select {
	case <-drained:
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-fallbackErr
}

// track adds cn to the connections Shutdown waits for; false when the front
// is closing.
func (f *Front) track(cn *conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return false
	}
	f.conns[cn] = struct{}{}
	return true
}

func (f *Front) untrack(cn *conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, cn)
	if f.closing && len(f.conns) == 0 {
		close(f.drained)
	}
}

// activate marks cn busy with a request, unless the front is closing.
func (f *Front) activate(cn *conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return false
	}
	cn.active = true
	return true
}

// deactivate marks cn idle; false when the front is closing, and cn with
// it.
func (f *Front) deactivate(cn *conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	cn.active = false
	return !f.closing
}

// route returns the fast route serving path and its pattern.
func (f *Front) route(path string) (httpx.FastRoute, string) {
	for _, r := range f.cfg.Routes {
		if pattern := r.FastRoute(path); pattern != "" {
			return r, pattern
		}
	}
	return nil, ""
}

// handOver gives cn's connection, with what was read from it and not
// consumed, to the fallback server.
func (f *Front) handOver(cn *conn) {
	buffered, _ := cn.br.Peek(cn.br.Buffered())
	replay := make([]byte, 0, len(buffered)+1)
	if cn.r.hasPending {
		replay = append(replay, cn.r.pending)
	}
	replay = append(replay, buffered...)
	cn.rwc.SetReadDeadline(time.Time{})
	if !f.fallback.hand(&replayConn{Conn: cn.rwc, replay: replay}) {
		cn.rwc.Close()
	}
}

// connListener is the fallback server's listener: it accepts the
// connections the front hands over.
type connListener struct {
	addr   net.Addr
	ch     chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, ch: make(chan net.Conn), closed: make(chan struct{})}
}

// hand passes c to the fallback server; false once it stopped accepting.
func (l *connListener) hand(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.closed:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

// replayConn is a connection whose first reads return replay.
type replayConn struct {
	net.Conn
	replay []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.replay) > 0 {
		n := copy(p, c.replay)
		c.replay = c.replay[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// bufioPool recycles the connections' buffers (4 KiB each, as net/http's).
var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
)
