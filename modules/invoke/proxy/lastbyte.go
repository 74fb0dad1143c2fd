package proxy

import (
	"net/http"
	"strconv"
)

// lastByteHeld passes a response on to the caller's writer, except the last
// byte of a body of declared length, which release writes: the caller has
// the whole answer only once the invocation's record is in the journal, so
// no crash loses the record of an answered invocation. A body cut short
// never reaches its last byte, so nothing is held and the caller sees a
// short body, an error. Bodies without a declared length are framed by the
// HTTP server, whose end (the last chunk, or closing the connection) goes
// out after the handler returned anyway.
type lastByteHeld struct {
	http.ResponseWriter
	wroteHeader bool
	// remaining is how much of the declared body is still to come; 0: no
	// body of declared length, or all of it written.
	remaining int64
	last      [1]byte
	held      bool
}

func (h *lastByteHeld) WriteHeader(code int) {
	if !h.wroteHeader {
		h.wroteHeader = true
		if n, err := strconv.ParseInt(h.Header().Get("Content-Length"), 10, 64); err == nil && n > 0 {
			h.remaining = n
		}
	}
	h.ResponseWriter.WriteHeader(code)
}

func (h *lastByteHeld) Write(p []byte) (int, error) {
	if !h.wroteHeader {
		h.WriteHeader(http.StatusOK)
	}
	if h.remaining == 0 || int64(len(p)) != h.remaining {
		n, err := h.ResponseWriter.Write(p)
		if int64(len(p)) < h.remaining {
			h.remaining -= int64(n)
		}
		return n, err
	}
	n, err := h.ResponseWriter.Write(p[:len(p)-1])
	if err != nil {
		return n, err
	}
	h.last[0], h.held, h.remaining = p[len(p)-1], true, 0
	return len(p), nil
}

// release writes the held byte, if any.
func (h *lastByteHeld) release() {
	if h.held {
		h.held = false
		h.ResponseWriter.Write(h.last[:])
	}
}
