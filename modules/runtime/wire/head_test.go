package wire

import (
	"bufio"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func parse(raw string) (head, http.Header, error) {
	dst := http.Header{}
	h, err := readHead(bufio.NewReaderSize(strings.NewReader(raw), bufSize), dst)
	return h, dst, err
}

func TestReadHead(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    head
		headers http.Header
		wantErr string
	}{
		{name: "minimal", raw: "HTTP/1.1 200 OK\r\n\r\n", want: head{status: 200, contentLength: -1}, headers: http.Header{}},
		{name: "fields of the protocol are taken, not passed on; Content-Length is both",
			raw: "HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-Sless-Logs: \"a\\nb\"\r\nX-Sless-Error: \"boom\"\r\n" +
				"X-Sless-Handler-Us: 1500\r\nx-sless-other: 1\r\nConnection: close\r\nContent-Type: text/plain\r\n\r\n",
			want:    head{status: 201, contentLength: 5, close: true, logs: "a\nb", handlerError: "boom", handler: 1500 * 1000},
			headers: http.Header{"Content-Type": {"text/plain"}, "Content-Length": {"5"}}},
		{name: "a repeated Content-Length of the same value", raw: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\n",
			want: head{status: 200, contentLength: 3}, headers: http.Header{"Content-Length": {"3"}}},
		{name: "Transfer-Encoding overrides Content-Length, which is not passed on",
			raw:  "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
			want: head{status: 200, contentLength: -1, chunked: true}, headers: http.Header{}},
		{name: "a signed Content-Length", raw: "HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\n", wantErr: "malformed Content-Length"},
		{name: "conflicting Content-Lengths", raw: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", wantErr: "malformed Content-Length"},
		{name: "interim responses are skipped",
			raw:     "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\nA: 1\r\nA: 2\r\n\r\n",
			want:    head{status: 204, contentLength: -1},
			headers: http.Header{"A": {"1", "2"}}},
		{name: "chunked", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n", want: head{status: 200, contentLength: -1, chunked: true}, headers: http.Header{}},
		{name: "bare LF line ends", raw: "HTTP/1.1 200 OK\nB: x\n\n", want: head{status: 200, contentLength: -1}, headers: http.Header{"B": {"x"}}},
		{name: "switching protocols is refused", raw: "HTTP/1.1 101 Switching Protocols\r\n\r\n", wantErr: "malformed status line"},
		{name: "status out of range", raw: "HTTP/1.1 099 Low\r\n\r\n", wantErr: "malformed status line"},
		{name: "not HTTP", raw: "SSH-2.0-OpenSSH_9\r\n\r\n", wantErr: "malformed status line"},
		{name: "negative Content-Length", raw: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", wantErr: "malformed Content-Length"},
		{name: "header line without a colon", raw: "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", wantErr: "malformed header line"},
		{name: "head cut short", raw: "HTTP/1.1 200 OK\r\nA: 1\r\n", wantErr: "EOF"},
		{name: "head over the limit", raw: "HTTP/1.1 200 OK\r\nA: " + strings.Repeat("x", MaxHeadBytes) + "\r\n\r\n", wantErr: errHeadTooLarge.Error()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, dst, err := parse(tc.raw)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h != tc.want {
				t.Errorf("head = %+v, want %+v", h, tc.want)
			}
			if len(dst) != len(tc.headers) {
				t.Errorf("headers = %v, want %v", dst, tc.headers)
			}
			for k, v := range tc.headers {
				if strings.Join(dst[k], ",") != strings.Join(v, ",") {
					t.Errorf("header %s = %v, want %v", k, dst[k], v)
				}
			}
		})
	}
}

// FuzzReadHead feeds arbitrary bytes to the parser of instance responses: it
// must never panic, and whatever it accepts must be a final response whose
// headers hold nothing of the protocol, with logs within their cap, and
// whose Content-Length, when passed on, is the one that frames the body.
func FuzzReadHead(f *testing.F) {
	f.Add("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Sless-Logs: \"hi\"\r\n\r\nok")
	f.Add("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n")
	f.Add("HTTP/1.1 500 x\nX-Sless-Error: \"\\u00e9\"\nConnection: close\n\n")
	f.Fuzz(func(t *testing.T, raw string) {
		h, dst, err := parse(raw)
		if err != nil {
			if errors.Is(err, errHeadTooLarge) && len(raw) <= MaxHeadBytes {
				t.Fatalf("a head of %d bytes was refused as too large", len(raw))
			}
			return
		}
		if h.status < 200 || h.status > 999 {
			t.Errorf("accepted status %d", h.status)
		}
		if h.contentLength < -1 {
			t.Errorf("accepted Content-Length %d", h.contentLength)
		}
		if len(h.logs) > MaxLogBytes+len("...[truncated 9223372036854775807 bytes]") {
			t.Errorf("logs of %d bytes passed the cap", len(h.logs))
		}
		for k, v := range dst {
			switch {
			case k == "Content-Length":
				if n, err := parseLength(strings.Join(v, ",")); err != nil || n != h.contentLength {
					t.Errorf("Content-Length %q reached the client for a body of %d bytes", v, h.contentLength)
				}
			case skipHeader(k):
				t.Errorf("header %q reached the client", k)
			}
		}
	})
}
