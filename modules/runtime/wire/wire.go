// Package wire is the platform's side of the instance protocol
// (../PROTOCOL.md): a client that sends invocations to one instance over
// keep-alive HTTP/1.1 connections and streams the answers to a
// http.ResponseWriter. Executors of both modes use it: over a unix socket to a
// local process, over TCP to a Service.
//
// It is written for the /fn hot path instead of using net/http's Transport:
// no goroutines per connection, no request or response objects, one pooled
// copy buffer, headers written straight into the client's response.
package wire

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/dustin/go-humanize"

	"sless.kube5s.ru/sless/internal/rawio"
	"sless.kube5s.ru/sless/modules/runtime"
)

// Client talks to one instance. It is safe for concurrent use; each
// invocation uses a connection of its own, reused afterwards.
type Client struct {
	dial func(ctx context.Context) (net.Conn, error)

	// pending is the control request that Send sent, until a Do or Await
	// takes it to read its answer.
	pending atomic.Pointer[pendingCall]

	mu     sync.Mutex
	idle   []*conn
	closed bool
}

// pendingCall is a control request sent on cn whose answer is not read yet;
// the request's deadline is the answer's.
type pendingCall struct {
	cn       *conn
	req      *runtime.Invocation
	answered func(status int, body []byte, err error) error
}

// NewClient returns a client that opens connections with dial.
func NewClient(dial func(ctx context.Context) (net.Conn, error)) *Client {
	return &Client{dial: dial}
}

// UnixDialer dials the unix socket at path.
func UnixDialer(path string) func(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", path) }
}

type conn struct {
	net.Conn
	br *bufio.Reader
	bw *bufio.Writer
	// body is the reader of a response body of known length, reused by
	// every response on the connection.
	body io.LimitedReader
}

// bufSize is the size of a connection's read and write buffers, kept for
// the instance's life: 4 KiB holds a hello's request and response whole; a
// longer head line is assembled by readLine, a longer body streams past.
const bufSize = 4 << 10

// MaxHeadBytes bounds a response's status line and headers. It is far above
// what a wrapper sends (X-Sless-Logs carries at most MaxLogBytes, which JSON
// escaping can grow up to six times), so that only a broken instance reaches
// it.
const MaxHeadBytes = 1 << 20

var errHeadTooLarge = errors.New("the response head exceeds MaxHeadBytes")

// MaxLogBytes caps the logs of one invocation (PROTOCOL.md): longer logs are
// cut to this many bytes followed by a "...[truncated N bytes]" marker. The
// wrappers cut their output already; Do applies the same cap to whatever an
// instance sends.
const MaxLogBytes = 64 << 10

func (c *Client) get(ctx context.Context) (*conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, runtime.Errorf(runtime.ErrCrashed, "the instance stopped", runtime.ErrNotSent)
	}
	for n := len(c.idle); n > 0; n = len(c.idle) {
		cn := c.idle[n-1]
		c.idle = c.idle[:n-1]
		if peerClosed(cn) {
			// The instance exited while the connection was idle.
			cn.Close()
			continue
		}
		c.mu.Unlock()
		return cn, nil
	}
	c.mu.Unlock()
	nc, err := c.dial(ctx)
	if err != nil {
		return nil, runtime.Errorf(runtime.ErrCrashed, "the instance could not be reached", fmt.Errorf("%w: connecting to the instance: %w", runtime.ErrNotSent, err))
	}
	nc = rawio.Wrap(nc)
	return &conn{Conn: nc, br: bufio.NewReaderSize(nc, bufSize), bw: bufio.NewWriterSize(nc, bufSize)}, nil
}

func (c *Client) put(cn *conn) {
	c.mu.Lock()
	if !c.closed {
		c.idle = append(c.idle, cn)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	cn.Close()
}

// Close closes the idle connections and refuses new invocations.
func (c *Client) Close() {
	c.mu.Lock()
	idle := c.idle
	if pc := c.pending.Swap(nil); pc != nil {
		idle = append(idle, pc.cn)
	}
	c.idle, c.closed = nil, true
	c.mu.Unlock()
	for _, cn := range idle {
		cn.Close()
	}
}

// takePending returns the pending control request, if any, which the
// caller then answers for.
func (c *Client) takePending() *pendingCall {
	if c.pending.Load() == nil {
		return nil // without a write to a line every invocation shares
	}
	return c.pending.Swap(nil)
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// peerClosed reports whether an idle connection's other end is closed (or
// sent bytes no request asked for), with one non-blocking peek: about a
// microsecond, against a 502 for the first invocation after its instance
// died.
func peerClosed(cn *conn) bool {
	if cn.br.Buffered() > 0 {
		return true
	}
	rc, ok := cn.Conn.(*rawio.Conn)
	return ok && !rc.Idle()
}

// Do sends inv and writes the instance's response to w. See runtime.Lease.
// Behind a control request that Send sent, it reads that request's answer
// first (by that request's deadline), and fails with the error its
// answered function returns; inv's deadline then counts from the answer.
func (c *Client) Do(ctx context.Context, inv *runtime.Invocation, w http.ResponseWriter) (runtime.Result, error) {
	var (
		cn       *conn
		res      runtime.Result
		reusable bool
		err      error
	)
	if pc := c.takePending(); pc != nil {
		cn = pc.cn
		res, reusable, err = pipelined(ctx, pc, inv, w)
	} else {
		if cn, err = c.get(ctx); err != nil {
			return runtime.Result{}, err
		}
		cn.SetDeadline(inv.Deadline)
		defer cancelOnDone(ctx, cn)()
		res, reusable, err = roundTrip(cn, inv, w)
	}
	if err != nil || !reusable {
		cn.Close()
		return res, err
	}
	// The deadline stays: the next Do sets its own before any use.
	c.put(cn)
	return res, nil
}

// roundTrip writes the request and streams the response. reusable reports
// that the connection is at the start of the next response.
func roundTrip(cn *conn, inv *runtime.Invocation, w http.ResponseWriter) (res runtime.Result, reusable bool, err error) {
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	n, err := writeRequest(cn.bw, inv, *buf)
	if err != nil {
		return runtime.Result{RequestBytes: n}, false, err
	}
	return readResponse(cn, inv, w, *buf, n)
}

// pipelined writes inv behind the control request pc, reads pc's answer,
// then streams inv's response, like roundTrip.
func pipelined(ctx context.Context, pc *pendingCall, inv *runtime.Invocation, w http.ResponseWriter) (res runtime.Result, reusable bool, err error) {
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	cn := pc.cn
	n, err := writeRequest(cn.bw, inv, *buf)
	if err != nil {
		return runtime.Result{RequestBytes: n}, false, err
	}
	// Cancelling waits for the answer, which tells whether the instance
	// is fit to keep.
	waited := time.Now()
	if err := pc.read(*buf); err != nil {
		return runtime.Result{RequestBytes: n}, false, err
	}
	cn.SetDeadline(inv.Deadline.Add(time.Since(waited)))
	defer cancelOnDone(ctx, cn)()
	return readResponse(cn, inv, w, *buf, n)
}

// cancelOnDone makes cancelling ctx end the exchange on cn like the
// deadline does, until the function it returns is called.
func cancelOnDone(ctx context.Context, cn *conn) (stop func() bool) {
	if ctx.Done() == nil {
		return neverCancelled
	}
	return context.AfterFunc(ctx, func() { cn.SetDeadline(time.Unix(1, 0)) })
}

// neverCancelled is the stop of a context that is never cancelled: there is
// no AfterFunc to stop.
func neverCancelled() bool { return false }

// readResponse streams the response to inv, whose n body bytes were sent,
// like roundTrip.
func readResponse(cn *conn, inv *runtime.Invocation, w http.ResponseWriter, buf []byte, n int64) (res runtime.Result, reusable bool, err error) {
	r := inv.Request
	res.RequestBytes = n
	head, err := readHead(cn.br, w.Header())
	if errors.Is(err, errHeadTooLarge) {
		// The handler's headers, most likely: the instance is fine.
		return res, false, runtime.Errorf(runtime.ErrResponseTooLarge,
			"the headers exceed the limit of "+humanize.IBytes(MaxHeadBytes), nil)
	}
	if errors.Is(err, syscall.ECONNRESET) {
		// A reset means the instance closed the connection with the request
		// still unread: it died before taking it, and the handler, which
		// runs only on a whole request, did not run.
		return res, false, runtime.Errorf(runtime.ErrCrashed, "the instance closed the connection without reading the request", runtime.ErrNotSent)
	}
	if err != nil {
		return res, false, connErr("reading the response", err)
	}
	res.StatusCode, res.Logs, res.Error, res.Handler = head.status, head.logs, head.handlerError, head.handler
	if r.Method == http.MethodHead || head.status == http.StatusNoContent || head.status == http.StatusNotModified {
		// No body follows, whatever the Content-Length says (for HEAD
		// and 304, the length of the body a GET would get).
		head.contentLength, head.chunked = 0, false
	}
	if inv.MaxResponseBytes > 0 && head.contentLength > inv.MaxResponseBytes {
		// Refused before anything is written: the caller answers with an
		// error. The unread body makes the connection unusable, not the
		// instance.
		return res, false, runtime.Errorf(runtime.ErrResponseTooLarge, fmt.Sprintf("the body of %s exceeds the limit of %s",
			humanize.IBytes(uint64(head.contentLength)), humanize.IBytes(uint64(inv.MaxResponseBytes))), nil)
	}
	if inv.BeforeWrite != nil {
		inv.BeforeWrite(&res)
	}
	w.WriteHeader(head.status)
	body, reusable := cn.bodyReader(head)
	limited := body
	if inv.MaxResponseBytes > 0 && head.contentLength < 0 {
		limited = io.LimitReader(body, inv.MaxResponseBytes)
	}
	written, readErr, writeErr := copyStream(w, limited, buf)
	copyErr := cmp.Or(writeErr, readErr)
	res.ResponseBytes = written
	if copyErr != nil {
		// The status is out: report the failure in the result.
		res.Err = copyErr
		return res, false, nil
	}
	if limited != body && written == inv.MaxResponseBytes {
		if n, _ := body.Read(buf[:1]); n > 0 {
			res.Err = runtime.Errorf(runtime.ErrResponseTooLarge,
				"the body exceeds the limit of "+humanize.IBytes(uint64(inv.MaxResponseBytes)), nil)
			return res, false, nil
		}
	}
	if head.chunked && reusable {
		// The chunked reader stops at the last chunk; the trailer section
		// (ignored) ends the response.
		budget := MaxHeadBytes
		if err := skipFields(cn.br, &budget); err != nil {
			res.Err = connErr("reading the response trailer", err)
			return res, false, nil
		}
	}
	if head.contentLength >= 0 && written != head.contentLength {
		res.Err = runtime.Errorf(runtime.ErrCrashed, fmt.Sprintf("the response body ended after %d of %d bytes", written, head.contentLength), nil)
		return res, false, nil
	}
	return res, reusable && !head.close, nil
}

// hopHeaders are connection-level headers that a proxy does not forward.
// Expect is among them: the server has answered the client's 100-continue,
// and the body follows the request head to the instance at once.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true,
	"Upgrade": true, "Content-Length": true, "Host": true, "Expect": true,
}

// ProtocolHeaderPrefix starts the headers of the instance protocol, which
// clients may neither send nor receive.
const ProtocolHeaderPrefix = "X-Sless-"

func skipHeader(k string) bool {
	return hopHeaders[k] || (len(k) >= len(ProtocolHeaderPrefix) && strings.EqualFold(k[:len(ProtocolHeaderPrefix)], ProtocolHeaderPrefix))
}

// writeRequest sends inv, copying its body through buf.
func writeRequest(bw *bufio.Writer, inv *runtime.Invocation, buf []byte) (int64, error) {
	r := inv.Request
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	bw.WriteString(inv.Path)
	if r.URL.RawQuery != "" {
		bw.WriteByte('?')
		bw.WriteString(r.URL.RawQuery)
	}
	bw.WriteString(" HTTP/1.1\r\nHost: instance\r\n")
	for k, vv := range r.Header {
		if skipHeader(k) || (k == "Traceparent" && inv.Traceparent != "") {
			continue
		}
		for _, v := range vv {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	bw.WriteString("X-Sless-Invocation-Id: ")
	bw.WriteString(inv.ID)
	// The time left rather than the deadline: the instance counts it from
	// when it starts serving the invocation, on its own clock, so that a
	// pipelined invocation's time starts after the specialize answer (as
	// the platform's own deadline does) and no two clocks need to agree.
	bw.WriteString("\r\nX-Sless-Timeout-Ms: ")
	// Appended to the buffer's free space: an array of its own would
	// escape to the heap through Write.
	bw.Write(strconv.AppendInt(bw.AvailableBuffer(), max(time.Until(inv.Deadline).Milliseconds(), 0), 10))
	bw.WriteString("\r\nX-Sless-Trigger: ")
	bw.Write(inv.Trigger)
	bw.WriteString("\r\n")
	if inv.Traceparent != "" {
		bw.WriteString("Traceparent: ")
		bw.WriteString(inv.Traceparent)
		bw.WriteString("\r\n")
	}

	body := r.Body
	if body == nil || body == http.NoBody || r.ContentLength == 0 {
		bw.WriteString("Content-Length: 0\r\n\r\n")
		return 0, connErr("sending the request", bw.Flush())
	}
	if r.ContentLength > 0 {
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), r.ContentLength, 10))
		bw.WriteString("\r\n\r\n")
		n, err := copyBody(bw, io.LimitReader(body, r.ContentLength), buf)
		if err == nil && n < r.ContentLength {
			err = &runtime.BodyError{Err: io.ErrUnexpectedEOF}
		}
		if err != nil {
			return n, err
		}
		return n, connErr("sending the request", bw.Flush())
	}
	bw.WriteString("Transfer-Encoding: chunked\r\n\r\n")
	cw := httputil.NewChunkedWriter(bw)
	n, err := copyBody(cw, body, buf)
	if err != nil {
		return n, err
	}
	if err := cw.Close(); err != nil {
		return n, connErr("sending the request", err)
	}
	bw.WriteString("\r\n")
	return n, connErr("sending the request", bw.Flush())
}

// copyBody copies the client's body to the instance, telling a client-side
// failure (runtime.BodyError) from an instance-side one.
func copyBody(dst io.Writer, src io.Reader, buf []byte) (int64, error) {
	n, readErr, writeErr := copyStream(dst, src, buf)
	switch {
	case writeErr != nil:
		return n, connErr("sending the request body", writeErr)
	case readErr != nil:
		return n, &runtime.BodyError{Err: readErr}
	}
	return n, nil
}

// copyStream copies src to dst through buf until src ends (io.EOF is no
// error) or either side fails, and says which failed. Unlike
// io.CopyBuffer it uses no optional interface of either side: a response
// writer's ReadFrom would read into a buffer of its own.
func copyStream(dst io.Writer, src io.Reader, buf []byte) (n int64, readErr, writeErr error) {
	for {
		nr, rerr := src.Read(buf)
		if nr > 0 {
			nw, werr := dst.Write(buf[:nr])
			n += int64(nw)
			if werr == nil && nw < nr {
				werr = io.ErrShortWrite
			}
			if werr != nil {
				return n, nil, werr
			}
		}
		if rerr == io.EOF {
			return n, nil, nil
		}
		if rerr != nil {
			return n, rerr, nil
		}
	}
}

// connErr classifies a connection failure: the deadline passing is a
// timeout, anything else means the instance is gone.
func connErr(doing string, err error) error {
	if err == nil {
		return nil
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w (%s)", runtime.ErrTimeout, doing)
	}
	return runtime.Errorf(runtime.ErrCrashed, "the connection to the instance failed while "+doing, err)
}

type head struct {
	status        int
	contentLength int64 // -1: unknown
	chunked       bool
	close         bool
	logs          string
	handlerError  string
	handler       time.Duration
}

// readHead parses the status line and headers, copying the headers a client
// may see into dst. The head may be up to MaxHeadBytes long, in lines of any
// length.
func readHead(br *bufio.Reader, dst http.Header) (head, error) {
	h := head{contentLength: -1}
	budget := MaxHeadBytes
	var err error
	for {
		h.status, err = readStatusLine(br, &budget)
		if err != nil || h.status >= 200 {
			break
		}
		// An interim response (100 Continue, 103 Early Hints) precedes the
		// real one: skip it, headers and all.
		if err = skipFields(br, &budget); err != nil {
			break
		}
	}
	if err != nil {
		return h, err
	}
	for {
		line, err := readLine(br, &budget)
		if err != nil {
			return h, err
		}
		if len(line) == 0 {
			if h.chunked {
				// Transfer-Encoding overrides Content-Length (RFC 9112,
				// 6.3), which a proxy removes before passing the
				// response on.
				h.contentLength = -1
				delete(dst, "Content-Length")
			}
			return h, nil
		}
		i := bytes.IndexByte(line, ':')
		if i <= 0 {
			return h, fmt.Errorf("malformed header line %q", truncateLine(line))
		}
		key, known := wrapperKeys[string(line[:i])] // no allocation to look up
		if !known {
			key = http.CanonicalHeaderKey(string(line[:i]))
		}
		value := string(bytes.TrimSpace(line[i+1:]))
		switch key {
		case "Content-Length":
			n, err := parseLength(value)
			if err != nil || (h.contentLength >= 0 && n != h.contentLength) {
				return h, fmt.Errorf("malformed Content-Length %q", value)
			}
			// Passed on: a client sees the length the instance framed,
			// also in the answer to HEAD, which has no body.
			h.contentLength, dst[key] = n, []string{value}
		case "Transfer-Encoding":
			h.chunked = strings.EqualFold(value, "chunked")
		case "Connection":
			h.close = strings.EqualFold(value, "close")
		case "X-Sless-Logs":
			h.logs = capLogs(decodeJSONString(value))
		case "X-Sless-Error":
			h.handlerError = decodeJSONString(value)
		case "X-Sless-Handler-Us":
			if us, err := strconv.ParseInt(value, 10, 64); err == nil {
				h.handler = time.Duration(us) * time.Microsecond
			}
		default:
			if !skipHeader(key) {
				dst[key] = append(dst[key], value)
			}
		}
	}
}

// parseLength parses a Content-Length value: decimal digits only (RFC 9110,
// 8.6); ParseInt would also take a sign.
func parseLength(v string) (int64, error) {
	n, err := strconv.ParseUint(v, 10, 63)
	return int64(n), err
}

// wrapperKeys are the header names the wrappers write, in canonical form,
// looked up without making a string of each name read.
var wrapperKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"Content-Type", "Content-Length", "Transfer-Encoding", "Connection",
		"X-Sless-Logs", "X-Sless-Error", "X-Sless-Handler-Us"} {
		m[k] = k
	}
	return m
}()

// readStatusLine reads "HTTP/1.1 200 OK" and returns the status.
func readStatusLine(br *bufio.Reader, budget *int) (int, error) {
	line, err := readLine(br, budget)
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, fmt.Errorf("malformed status line %q", truncateLine(line))
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil || status < 100 || status > 999 || status == http.StatusSwitchingProtocols {
		return 0, fmt.Errorf("malformed status line %q", truncateLine(line))
	}
	return status, nil
}

// readLine reads one line of the head, charging its length to budget. A
// line longer than the read buffer is assembled in a fresh slice.
func readLine(br *bufio.Reader, budget *int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	var long []byte
	for err == bufio.ErrBufferFull && len(long)+len(line) <= *budget {
		long = append(long, line...)
		line, err = br.ReadSlice('\n')
	}
	if long != nil {
		line = append(long, line...)
	}
	if *budget -= len(line); *budget < 0 {
		return nil, errHeadTooLarge
	}
	if err != nil {
		return nil, err
	}
	return bytes.TrimRight(line, "\r\n"), nil
}

// skipFields reads header or trailer fields up to the empty line that ends
// them.
func skipFields(br *bufio.Reader, budget *int) error {
	for {
		line, err := readLine(br, budget)
		if err != nil || len(line) == 0 {
			return err
		}
	}
}

func truncateLine(line []byte) []byte {
	if len(line) > 100 {
		return line[:100]
	}
	return line
}

func decodeJSONString(v string) string {
	var s string
	if json.Unmarshal([]byte(v), &s) != nil {
		return v
	}
	return s
}

// capLogs applies MaxLogBytes to logs: longer logs keep their first
// MaxLogBytes bytes (cut back to a UTF-8 character boundary) followed by
// "...[truncated N bytes]", N being the number of bytes left out. Logs of at
// most MaxLogBytes followed by such a marker were cut by the wrapper and are
// kept as they are.
func capLogs(logs string) string {
	if len(logs) <= MaxLogBytes || cutAlready(logs) {
		return logs
	}
	cut := MaxLogBytes
	for cut > 0 && !utf8.RuneStart(logs[cut]) {
		cut--
	}
	return logs[:cut] + fmt.Sprintf(truncatedMarker, len(logs)-cut)
}

// cutAlready reports whether logs are at most MaxLogBytes followed by the
// truncation marker.
func cutAlready(logs string) bool {
	i := strings.LastIndex(logs, "...[truncated ")
	if i < 0 || i > MaxLogBytes {
		return false
	}
	var n int64
	_, err := fmt.Sscanf(logs[i:], truncatedMarker, &n)
	return err == nil && strings.HasSuffix(logs, " bytes]")
}

const truncatedMarker = "...[truncated %d bytes]"

// bodyReader returns the response body and whether the connection can carry
// another response after it.
func (cn *conn) bodyReader(h head) (io.Reader, bool) {
	switch {
	case h.chunked:
		return httputil.NewChunkedReader(cn.br), true
	case h.contentLength >= 0:
		cn.body = io.LimitedReader{R: cn.br, N: h.contentLength}
		return &cn.body, true
	}
	return cn.br, false // delimited by closing the connection
}

// Call makes a control request (such as /_sless/health) with a JSON body
// and returns the status and body of the answer.
func (c *Client) Call(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	var out runtime.ResponseBuffer
	_, err := c.Do(ctx, controlRequest(method, path, body, deadline), &out)
	if err != nil {
		return 0, nil, err
	}
	return out.StatusCode, out.Body.Bytes(), nil
}

// controlRequest is the invocation that makes a control request.
func controlRequest(method, path string, body []byte, deadline time.Time) *runtime.Invocation {
	req := &http.Request{
		Method: method, URL: &url.URL{Path: path}, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
	}
	return &runtime.Invocation{Request: req, Path: path, Deadline: deadline, Trigger: []byte("{}")}
}

// maxControlAnswer bounds the body of the answer that Send's request gets.
const maxControlAnswer = 1 << 20

// Send writes a control request (such as /_sless/specialize) with a JSON
// body and returns without waiting for its answer, which is due by
// deadline. The next Do writes its invocation behind it on the same
// connection and reads the answer first: an instance's first invocation
// saves a round trip. Await reads the answer when no invocation follows.
// answered gets the answer's status and body, or the error that kept it
// from being read (a timeout at the deadline), and returns what fails the
// Do or Await: nil goes on. It runs once, in the Do or Await.
func (c *Client) Send(ctx context.Context, method, path string, body []byte, deadline time.Time,
	answered func(status int, body []byte, err error) error) error {
	cn, err := c.get(ctx)
	if err != nil {
		return err
	}
	cn.SetDeadline(deadline)
	req := controlRequest(method, path, body, deadline)
	req.MaxResponseBytes = maxControlAnswer
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	if _, err := writeRequest(cn.bw, req, *buf); err != nil {
		cn.Close()
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		cn.Close()
		return runtime.Errorf(runtime.ErrCrashed, "the instance stopped", runtime.ErrNotSent)
	case !c.pending.CompareAndSwap(nil, &pendingCall{cn: cn, req: req, answered: answered}):
		cn.Close()
		return errors.New("a control request sent before is not answered yet")
	}
	return nil
}

// Await reads the answer of the control request that Send sent, unless a
// Do has, and returns what its answered function returned.
func (c *Client) Await() error {
	pc := c.takePending()
	if pc == nil {
		return nil
	}
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	if err := pc.read(*buf); err != nil {
		pc.cn.Close()
		return err
	}
	c.put(pc.cn)
	return nil
}

// read reads pc's answer by its deadline and returns what answered makes of
// it; on nil the connection is at the start of the next response.
func (pc *pendingCall) read(buf []byte) error {
	pc.cn.SetReadDeadline(pc.req.Deadline)
	var out runtime.ResponseBuffer
	res, reusable, err := readResponse(pc.cn, pc.req, &out, buf, 0)
	if err == nil {
		err = res.Err
	}
	if err == nil && !reusable {
		err = runtime.Errorf(runtime.ErrCrashed, "the instance closed the connection after its answer", nil)
	}
	if err != nil {
		return pc.answered(0, nil, err)
	}
	return pc.answered(out.StatusCode, out.Body.Bytes(), nil)
}
