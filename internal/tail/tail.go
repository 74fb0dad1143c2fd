// Package tail keeps the end of a stream of output, for build logs and the
// error messages that quote a failed tool.
package tail

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is an io.Writer that keeps the last Max bytes written to it. It is
// safe for concurrent use, as a process's stdout and stderr may share it.
type Buffer struct {
	// Max is the number of bytes kept.
	Max int

	mu  sync.Mutex
	buf []byte
}

// Write implements io.Writer; it never fails.
func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.Max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns what is kept, with invalid UTF-8 (a cut multi-byte
// character) dropped.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.ToValidUTF8(t.buf, nil))
}

// LastLines returns the last n non-blank lines.
func (t *Buffer) LastLines(n int) string {
	var kept []string
	for _, l := range strings.Split(t.String(), "\n") {
		if strings.TrimSpace(l) != "" {
			kept = append(kept, l)
		}
	}
	if len(kept) > n {
		kept = kept[len(kept)-n:]
	}
	return strings.Join(kept, "\n")
}
