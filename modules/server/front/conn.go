package front

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"sless.kube5s.ru/sless/internal/rawio"
	"sless.kube5s.ru/sless/modules/server/httpx"
)

// conn is one client connection served by the front.
type conn struct {
	f      *Front
	rwc    net.Conn
	r      connReader
	br     *bufio.Reader
	bw     *bufio.Writer
	remote string
	// scratch holds a response's body until its head is sent.
	scratch [bufferBeforeChunking]byte
	// active: a request is being served (guarded by f.mu).
	active bool
}

func newConn(f *Front, c net.Conn) *conn {
	cn := &conn{f: f, rwc: c, remote: c.RemoteAddr().String()}
	raw := rawio.Wrap(c)
	cn.r.conn = raw
	cn.br = readers.Get().(*bufio.Reader)
	cn.br.Reset(&cn.r)
	cn.bw = writers.Get().(*bufio.Writer)
	cn.bw.Reset(raw)
	return cn
}

// closeIfIdleLocked closes the connection unless it serves a request; f.mu
// is held.
func (cn *conn) closeIfIdleLocked() {
	if !cn.active {
		cn.rwc.Close()
	}
}

// serve reads and answers requests until the connection closes, fails,
// asks to close, or has a request the front hands over.
func (cn *conn) serve() {
	handedOver := false
	defer func() {
		cn.f.untrack(cn)
		if !handedOver {
			cn.rwc.Close()
		}
		cn.br.Reset(nil)
		readers.Put(cn.br)
		cn.bw.Reset(nil)
		writers.Put(cn.bw)
	}()
	srv := cn.f.cfg.Fallback
	for first := true; ; first = false {
		wait := srv.IdleTimeout
		if first || wait <= 0 {
			wait = srv.ReadHeaderTimeout
		}
		if cn.br.Buffered() == 0 && !cn.r.hasPending {
			cn.setReadDeadline(wait)
			if _, err := cn.br.Peek(1); err != nil {
				return
			}
		}
		if !cn.f.activate(cn) {
			return
		}
		cn.setReadDeadline(srv.ReadHeaderTimeout)
		rq, err := cn.readRequest()
		if errors.Is(err, errHandOver) {
			cn.f.deactivate(cn)
			cn.f.handOver(cn)
			handedOver = true
			return
		}
		if err != nil {
			// A timeout or a closed connection: net/http does not answer
			// either.
			return
		}
		cn.rwc.SetReadDeadline(time.Time{})
		keep := cn.serveRequest(rq)
		if !cn.f.deactivate(cn) || !keep {
			return
		}
	}
}

func (cn *conn) setReadDeadline(d time.Duration) {
	var t time.Time
	if d > 0 {
		t = time.Now().Add(d)
	}
	cn.rwc.SetReadDeadline(t)
}

// errHandOver: the request is net/http's to answer.
var errHandOver = errors.New("handing the connection over")

// methods are the methods gin's Any routes answer, CONNECT aside (net/http
// reads its target differently).
var methods = map[string]string{
	"GET": "GET", "POST": "POST", "PUT": "PUT", "PATCH": "PATCH", "HEAD": "HEAD",
	"OPTIONS": "OPTIONS", "DELETE": "DELETE", "TRACE": "TRACE",
}

// readRequest reads a request head, leaving it in the buffer until it is
// known to be the front's: errHandOver leaves every byte read unconsumed.
func (cn *conn) readRequest() (*request, error) {
	head, err := cn.peekHead()
	if err != nil {
		return nil, err
	}
	rq, err := cn.parseHead(head)
	if err != nil {
		return nil, err
	}
	cn.br.Discard(len(head))
	return rq, nil
}

// peekHead returns the buffered request head up to and including the empty
// line that ends it.
func (cn *conn) peekHead() ([]byte, error) {
	from := 0
	for {
		n := cn.br.Buffered()
		b, _ := cn.br.Peek(n)
		for ; from < n; from++ {
			if b[from] != '\n' {
				continue
			}
			if from == 0 || b[from-1] != '\r' {
				return nil, errHandOver // a bare LF is net/http's to judge
			}
			if from >= 3 && b[from-2] == '\n' {
				return b[:from+1], nil
			}
		}
		if n == cn.br.Size() {
			return nil, errHandOver // a head longer than the buffer
		}
		if _, err := cn.br.Peek(n + 1); err != nil {
			var ne net.Error
			if n == 0 || errors.As(err, &ne) && ne.Timeout() {
				return nil, err
			}
			return nil, errHandOver // net/http answers a cut head
		}
	}
}

// request is the front's state of one request.
type request struct {
	req            *http.Request
	route          httpx.FastRoute
	pattern        string
	expectContinue bool
	body           *body
}

// parseHead parses head into a request when the front serves it.
func (cn *conn) parseHead(head []byte) (*request, error) {
	head = head[:len(head)-2] // the empty line
	line, _, _ := bytes.Cut(head, []byte("\r\n"))
	m, afterMethod, ok1 := bytes.Cut(line, []byte(" "))
	target, proto, ok2 := bytes.Cut(afterMethod, []byte(" "))
	method, known := methods[string(m)]
	if !ok1 || !ok2 || !known || string(proto) != "HTTP/1.1" || len(target) == 0 || target[0] != '/' {
		return nil, errHandOver
	}
	// One string holds the target and the header fields: the target and
	// every header value are substrings of it, not an allocation each.
	text := string(head[len(m)+1:])
	rawTarget := text[:len(target)]
	rest := text[len(afterMethod)+2:]
	path, _, _ := strings.Cut(rawTarget, "?")
	route, pattern := cn.f.route(path)
	if route == nil {
		return nil, errHandOver
	}
	u, err := url.ParseRequestURI(rawTarget)
	if err != nil {
		return nil, errHandOver
	}
	hdr := make(http.Header, 8)
	// Each header's first value gets a slice of one array, as net/http's
	// reader does, instead of a slice of its own.
	var values []string
	var host string
	hosts, lengths, encodings := 0, 0, 0
	var contentLength int64
	rq := &request{route: route, pattern: pattern}
	closeAfter := false
	for len(rest) > 0 {
		var field string
		field, rest, _ = strings.Cut(rest, "\r\n")
		i := strings.IndexByte(field, ':')
		if i <= 0 || field[0] == ' ' || field[0] == '\t' {
			return nil, errHandOver // no name, or an obsolete line folding
		}
		key := http.CanonicalHeaderKey(field[:i]) // returns a canonical name itself: no allocation
		value := strings.Trim(field[i+1:], " \t")
		if !httpguts.ValidHeaderFieldName(key) || !httpguts.ValidHeaderFieldValue(value) {
			return nil, errHandOver
		}
		switch key {
		case "Host":
			hosts++
			host = value
			continue
		case "Content-Length":
			lengths++
			n, err := strconv.ParseUint(value, 10, 63)
			if err != nil {
				return nil, errHandOver
			}
			contentLength = int64(n)
		case "Transfer-Encoding":
			encodings++
			if !strings.EqualFold(value, "chunked") {
				return nil, errHandOver
			}
			continue // as net/http, the framing is not a header
		case "Expect":
			if !strings.EqualFold(value, "100-continue") {
				return nil, errHandOver
			}
			rq.expectContinue = true
		case "Connection":
			closeAfter = closeAfter || httpguts.HeaderValuesContainsToken([]string{value}, "close")
		}
		if vv, ok := hdr[key]; ok {
			hdr[key] = append(vv, value)
			continue
		}
		if len(values) == 0 {
			values = make([]string, 1+strings.Count(rest, "\r\n")) // this line's and the rest's
		}
		hdr[key], values = values[:1:1], values[1:]
		hdr[key][0] = value
	}
	if hosts != 1 || !httpguts.ValidHostHeader(host) || lengths+encodings > 1 {
		return nil, errHandOver
	}
	req := &http.Request{
		Method: method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: hdr, Host: host,
		RemoteAddr: cn.remote, RequestURI: rawTarget, Close: closeAfter,
	}
	switch {
	case encodings == 1:
		req.TransferEncoding = []string{"chunked"}
		req.ContentLength = -1
		rq.body = &body{cn: cn, r: newChunkedBody(cn.br), length: -1}
	case contentLength > 0:
		req.ContentLength = contentLength
		rq.body = &body{cn: cn, r: io.LimitReader(cn.br, contentLength), length: contentLength}
	}
	if rq.body != nil {
		rq.body.expectContinue = rq.expectContinue
		req.Body = rq.body
	} else {
		rq.expectContinue = false
		req.Body = http.NoBody
	}
	rq.req = req
	return rq, nil
}

// connReader reads the client connection, first the byte a watch read
// (see reqCtx) took from it.
type connReader struct {
	conn       net.Conn
	pending    byte
	hasPending bool
}

func (r *connReader) Read(p []byte) (int, error) {
	if r.hasPending && len(p) > 0 {
		p[0], r.hasPending = r.pending, false
		return 1, nil
	}
	return r.conn.Read(p)
}
