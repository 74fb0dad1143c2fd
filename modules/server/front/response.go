package front

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// serveRequest answers rq and reports whether the connection can carry the
// next request.
func (cn *conn) serveRequest(rq *request) (keep bool) {
	start := time.Now()
	ctx := &reqCtx{cn: cn, body: rq.body}
	req := rq.req.WithContext(ctx)
	w := &response{cn: cn, req: req, rq: rq, header: make(http.Header, 8), contentLength: -1, buf: cn.scratch[:0]}
	if rq.body != nil {
		rq.body.w = w
	}
	abort, panicked := cn.runHandler(rq, w, req)
	if abort {
		ctx.finish()
		cn.bw.Flush() // what is out stays out, as net/http's final flush
		return false
	}
	err := w.finish()
	ctx.finish()
	if err != nil {
		return false
	}
	if !panicked && cn.f.cfg.Observe != nil {
		cn.f.cfg.Observe(rq.pattern, req.Method, w.status, time.Since(start))
	}
	if w.closeAfter {
		if w.bodyTooLarge {
			// As net/http: let the client read the answer before the
			// unread body makes the connection reset.
			if cw, ok := cn.rwc.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			}
			time.Sleep(rstAvoidanceDelay)
		}
		return false
	}
	return true
}

// rstAvoidanceDelay is net/http's.
const rstAvoidanceDelay = 500 * time.Millisecond

// runHandler runs the route's handler. A panic is logged and answered with
// a 500 as gin's recovery does, or, once the handler called WriteHeader,
// aborts the response; http.ErrAbortHandler aborts it quietly.
func (cn *conn) runHandler(rq *request, w *response, req *http.Request) (abort, panicked bool) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		panicked = true
		if v == http.ErrAbortHandler {
			abort = true
			return
		}
		cn.f.cfg.Log.Error("panic serving request", "method", req.Method, "path", req.URL.Path, "panic", v)
		if w.wroteHeader {
			abort = true
			return
		}
		w.header.Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"error":"internal server error; the server log has the details"}`))
	}()
	return rq.route.ServeFast(w, req), false
}

// bufferBeforeChunking is net/http's: a response whose handler returns
// before writing this much gets a Content-Length, a longer one is chunked.
const bufferBeforeChunking = 2048

// maxPostHandlerReadBytes is net/http's: at most this much of a request
// body the handler left unread is read to keep the connection.
const maxPostHandlerReadBytes = 256 << 10

// response is the http.ResponseWriter of a request the front serves. It
// frames the response as net/http's does.
type response struct {
	cn     *conn
	req    *http.Request
	rq     *request
	header http.Header

	status      int
	wroteHeader bool // WriteHeader was called
	headerSent  bool // the head is in the connection's buffer
	handlerDone bool
	// contentLength is the handler's Content-Length, or the one the front
	// set; -1: none.
	contentLength int64
	written       int64
	// buf holds the body until the head is sent.
	buf      []byte
	chunking bool
	// closeAfter: the connection closes after this response.
	closeAfter   bool
	bodyTooLarge bool
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 200 || code > 999 {
		// net/http sends a 1xx as an interim response; no fast route
		// writes one.
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	w.wroteHeader, w.status = true, code
	if cl := w.header.Get("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.contentLength = v
		} else {
			w.cn.f.cfg.Log.Debug("http: invalid Content-Length", "value", cl)
			w.header.Del("Content-Length")
		}
	}
}

func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowedForStatus(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.contentLength != -1 && w.written > w.contentLength {
		return 0, http.ErrContentLength
	}
	if !w.headerSent {
		if len(w.buf)+len(p) <= bufferBeforeChunking {
			w.buf = append(w.buf, p...)
			return len(p), nil
		}
		sniff := w.buf
		if len(sniff) < sniffLen {
			sniff = append(sniff, p[:min(len(p), sniffLen-len(sniff))]...)
		}
		w.sendHeader(sniff)
		if err := w.writeBody(w.buf); err != nil {
			return 0, err
		}
	}
	if err := w.writeBody(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// sniffLen is how much of a body http.DetectContentType looks at.
const sniffLen = 512

// writeBody writes p as the body's next bytes.
func (w *response) writeBody(p []byte) error {
	if len(p) == 0 || w.req.Method == http.MethodHead {
		return nil
	}
	bw := w.cn.bw
	if w.chunking {
		var hex [16]byte
		bw.Write(strconv.AppendInt(hex[:0], int64(len(p)), 16))
		bw.WriteString("\r\n")
		bw.Write(p)
		_, err := bw.WriteString("\r\n")
		return err
	}
	_, err := bw.Write(p)
	return err
}

// finish ends the response after the handler returned.
func (w *response) finish() error {
	w.handlerDone = true
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headerSent {
		w.sendHeader(w.buf)
		w.writeBody(w.buf)
	}
	w.buf = nil
	if w.chunking {
		w.cn.bw.WriteString("0\r\n\r\n")
	}
	if w.req.Method != http.MethodHead && w.contentLength != -1 && bodyAllowedForStatus(w.status) && w.written != w.contentLength {
		w.closeAfter = true // out of step with the client
	}
	return w.cn.bw.Flush()
}

// sendHeader writes the head into the connection's buffer; p is the start of
// the body, all of it when the handler is done. Its rules are net/http's
// (chunkWriter.writeHeader) for the headers a fast route can send.
func (w *response) sendHeader(p []byte) {
	w.headerSent = true
	code := w.status
	isHEAD := w.req.Method == http.MethodHead
	allowed := bodyAllowedForStatus(code)
	var setLength bool
	if w.handlerDone && allowed && w.contentLength == -1 && (!isHEAD || len(p) > 0) {
		w.contentLength, setLength = int64(len(p)), true
	}
	w.closeAfter = w.closeAfter || w.req.Close
	if b := w.rq.body; b != nil && !b.sawEOF.Load() {
		switch {
		case w.rq.expectContinue && !b.continueSent:
			w.closeAfter = true
		case !w.closeAfter:
			_, err := io.CopyN(io.Discard, b, maxPostHandlerReadBytes+1)
			switch {
			case err == nil:
				w.closeAfter, w.bodyTooLarge = true, true
			case !errors.Is(err, io.EOF):
				w.closeAfter = true
			}
		}
	}
	var contentType string
	if allowed {
		if _, haveType := w.header["Content-Type"]; !haveType && w.header.Get("Content-Encoding") == "" && len(p) > 0 {
			contentType = http.DetectContentType(p)
		}
	}
	w.chunking = allowed && !isHEAD && w.contentLength == -1

	bw := w.cn.bw
	bw.WriteString("HTTP/1.1 ")
	// Appended to the buffer's free space: an array of its own would
	// escape to the heap through Write.
	bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(code), 10))
	bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		bw.WriteString(text)
	} else {
		bw.WriteString("status code ")
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(code), 10))
	}
	bw.WriteString("\r\n")
	// As net/http: the handler's fields sorted by name, then the front's.
	var keysBuf [16]string
	keys := keysBuf[:0]
	for k := range w.header {
		if !frameHeader(k) && (allowed || !suppressed(code, k)) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range w.header[k] {
			writeField(bw, k, v)
		}
	}
	if _, ok := w.header["Date"]; !ok {
		bw.WriteString("Date: ")
		bw.Write(dates.now())
		bw.WriteString("\r\n")
	}
	if setLength {
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), w.contentLength, 10))
		bw.WriteString("\r\n")
	}
	if contentType != "" {
		writeField(bw, "Content-Type", contentType)
	}
	if w.closeAfter {
		writeField(bw, "Connection", "close")
	}
	if w.chunking {
		writeField(bw, "Transfer-Encoding", "chunked")
	}
	bw.WriteString("\r\n")
}

// dateCache formats the Date header once a second instead of per response.
type dateCache struct{ p atomic.Pointer[formattedDate] }

type formattedDate struct {
	unix int64
	text []byte
}

var dates dateCache

// now returns the current time in http.TimeFormat; the caller must not
// modify it.
func (c *dateCache) now() []byte {
	t := time.Now()
	if d := c.p.Load(); d != nil && d.unix == t.Unix() {
		return d.text
	}
	d := &formattedDate{unix: t.Unix(), text: t.UTC().AppendFormat(nil, http.TimeFormat)}
	c.p.Store(d)
	return d.text
}

// frameHeader reports a header the front sets itself.
func frameHeader(k string) bool {
	return k == "Connection" || k == "Transfer-Encoding" || k == "Trailer"
}

// suppressed reports a header net/http drops from a response without a
// body.
func suppressed(code int, k string) bool {
	return k == "Content-Length" || code == http.StatusNotModified && k == "Content-Type"
}

// writeField writes one header field; as net/http, line breaks in the value
// become spaces and surrounding blanks go.
func writeField(bw *bufio.Writer, k, v string) {
	if strings.ContainsAny(v, "\r\n") {
		v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
	}
	bw.WriteString(k)
	bw.WriteString(": ")
	bw.WriteString(strings.Trim(v, " \t"))
	bw.WriteString("\r\n")
}

func bodyAllowedForStatus(code int) bool {
	switch {
	case code >= 100 && code <= 199, code == http.StatusNoContent, code == http.StatusNotModified:
		return false
	}
	return true
}

// body is the request body of a request the front serves.
type body struct {
	cn *conn
	w  *response
	r  io.Reader
	// length is the declared length; -1: chunked.
	length         int64
	read           int64
	expectContinue bool
	continueSent   bool
	// sawEOF is read by reqCtx.Done, from any goroutine.
	sawEOF atomic.Bool
	err    error
}

func (b *body) Read(p []byte) (int, error) {
	if b.sawEOF.Load() {
		return 0, io.EOF
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.expectContinue && !b.continueSent && !b.w.headerSent {
		b.continueSent = true
		b.cn.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		if err := b.cn.bw.Flush(); err != nil {
			b.err = err
			return 0, err
		}
	}
	n, err := b.r.Read(p)
	b.read += int64(n)
	switch {
	case b.length >= 0 && b.read == b.length:
		err = io.EOF
	case b.length >= 0 && errors.Is(err, io.EOF):
		err = io.ErrUnexpectedEOF
	}
	if errors.Is(err, io.EOF) {
		b.sawEOF.Store(true)
	} else if err != nil {
		b.err = err
	}
	return n, err
}

// Close implements io.Closer; what is left of the body is dealt with when
// the response is sent.
func (b *body) Close() error { return nil }

// chunkedBody reads a chunked body and the trailer section after it.
type chunkedBody struct {
	br *bufio.Reader
	cr io.Reader
}

func newChunkedBody(br *bufio.Reader) *chunkedBody {
	return &chunkedBody{br: br, cr: httputil.NewChunkedReader(br)}
}

// maxTrailerBytes bounds the trailer section of a chunked request body,
// which is read and dropped, as the proxy does not pass trailers on.
const maxTrailerBytes = 64 << 10

func (c *chunkedBody) Read(p []byte) (int, error) {
	n, err := c.cr.Read(p)
	if err != io.EOF {
		return n, err
	}
	budget := maxTrailerBytes
	for {
		line, err := c.br.ReadSlice('\n')
		if budget -= len(line); budget < 0 {
			return n, errors.New("http: the trailer of the request body is too large")
		}
		if errors.Is(err, io.EOF) {
			return n, io.ErrUnexpectedEOF
		}
		if err != nil && err != bufio.ErrBufferFull {
			return n, err
		}
		if err == nil && len(bytes.TrimRight(line, "\r\n")) == 0 {
			return n, io.EOF
		}
	}
}

// reqCtx is the context of a request the front serves. Its Done starts a
// read on the client connection, once the request's body was read, that
// cancels the context when the client closes the connection, as net/http
// does for every request; it ends when the request does.
type reqCtx struct {
	cn   *conn
	body *body

	mu       sync.Mutex
	done     chan struct{}
	err      error
	finished bool
	watching chan struct{} // closed when the watch read returned
}

func (x *reqCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (x *reqCtx) Value(key any) any {
	switch key {
	case http.ServerContextKey:
		return x.cn.f.cfg.Fallback
	case http.LocalAddrContextKey:
		return x.cn.rwc.LocalAddr()
	}
	return nil
}

func (x *reqCtx) Err() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err
}

func (x *reqCtx) Done() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done != nil {
		return x.done
	}
	x.done = make(chan struct{})
	if x.err != nil {
		close(x.done)
		return x.done
	}
	// Only past the body: the read would take its bytes.
	if (x.body == nil || x.body.sawEOF.Load()) && x.cn.br.Buffered() == 0 && !x.cn.r.hasPending {
		x.watching = make(chan struct{})
		go x.watch()
	}
	return x.done
}

// watch reads the client connection until the client closes it, sends a
// byte (a pipelined request, kept for the next read) or finish stops it.
func (x *reqCtx) watch() {
	defer close(x.watching)
	var b [1]byte
	n, err := x.cn.rwc.Read(b[:])
	x.mu.Lock()
	defer x.mu.Unlock()
	if n == 1 {
		x.cn.r.pending, x.cn.r.hasPending = b[0], true
	}
	var ne net.Error
	if err != nil && !(x.finished && errors.As(err, &ne) && ne.Timeout()) {
		x.cancelLocked()
	}
}

func (x *reqCtx) cancelLocked() {
	if x.err != nil {
		return
	}
	x.err = context.Canceled
	if x.done != nil {
		close(x.done)
	}
}

// finish cancels the context and stops the watch read, if any.
func (x *reqCtx) finish() {
	x.mu.Lock()
	x.finished = true
	x.cancelLocked()
	watching := x.watching
	x.mu.Unlock()
	if watching != nil {
		x.cn.rwc.SetReadDeadline(aLongTimeAgo)
		<-watching
	}
}

var aLongTimeAgo = time.Unix(1, 0)
