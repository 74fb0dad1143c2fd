package runtime

import (
	"bytes"
	"net/http"
)

// BodyError is a failure to read the client's request body (it was too large
// or the client went away), which Lease.Do returns (wrapped) when it could
// not send the whole request: the caller's fault, not the instance's.
type BodyError struct{ Err error }

func (e *BodyError) Error() string { return "reading the request body: " + e.Err.Error() }
func (e *BodyError) Unwrap() error { return e.Err }

// ResponseBuffer is an http.ResponseWriter that keeps the response in
// memory, for control calls and for invocations made without an HTTP client.
type ResponseBuffer struct {
	header http.Header
	// StatusCode is the written status; 0 before WriteHeader.
	StatusCode int
	// Body is the written body.
	Body bytes.Buffer
}

// Header implements http.ResponseWriter.
func (b *ResponseBuffer) Header() http.Header {
	if b.header == nil {
		b.header = http.Header{}
	}
	return b.header
}

// WriteHeader implements http.ResponseWriter.
func (b *ResponseBuffer) WriteHeader(code int) {
	if b.StatusCode == 0 {
		b.StatusCode = code
	}
}

// Write implements http.ResponseWriter.
func (b *ResponseBuffer) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.Body.Write(p)
}
