package client

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sless.kube5s.ru/sless/internal/discovery"
)

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080"},
		{"127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"localhost:8080", "http://localhost:8080"},
		{"[::1]:8080", "http://[::1]:8080"},
		{" sless.example.com ", "http://sless.example.com"},
		{"https://sless.example.com/base/", "https://sless.example.com/base"},
	} {
		got, err := parseEndpoint(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseEndpoint(%q): got %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"ftp://host", "http://", "://x", "http://u:p@host", "http://host/?a=b", "host:port:x:"} {
		t.Setenv("SLESS_ENDPOINT", in)
		_, err := FromEnv()
		if err == nil || !strings.HasPrefix(err.Error(), "SLESS_ENDPOINT ") || strings.Contains(err.Error(), "first path segment") {
			t.Errorf("SLESS_ENDPOINT=%q: got %v, want an error about SLESS_ENDPOINT in its own words", in, err)
		}
		_, err = Resolve(in, "token")
		if err == nil || !strings.HasPrefix(err.Error(), "endpoint ") {
			t.Errorf("Resolve(%q): got %v, want an error about the endpoint setting", in, err)
		}
	}
}

func TestSameServer(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080", true},
		{"http://127.0.0.1:8080", "http://localhost:8080", true},
		{"http://[::]:8080", "http://127.0.0.1:8080", true},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8081", false},
		{"http://127.0.0.1:8080", "https://127.0.0.1:8080", false},
		{"http://127.0.0.1:80", "http://localhost", true},
		{"http://127.0.0.1:8080", "http://sless.example.com:8080", false},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080/other", false},
	} {
		if got := sameServer(tc.a, tc.b); got != tc.want {
			t.Errorf("sameServer(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// localServer publishes a running server's endpoint and token in a data
// directory, as the server does, and points SLESS_DATA_DIR at it.
func localServer(t *testing.T, endpoint string) {
	t.Helper()
	dir := t.TempDir()
	l, err := discovery.TakeLock(dir, discovery.Holder{PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Unlock)
	if err := discovery.Write(dir, discovery.Info{Endpoint: endpoint, PID: os.Getpid()}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, discovery.TokenFile), []byte("local-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLESS_DATA_DIR", dir)
}

func TestFromEnvTakesTheLocalTokenOnlyForTheLocalServer(t *testing.T) {
	localServer(t, "http://127.0.0.1:8080")
	for _, tc := range []struct{ endpoint, token, wantEndpoint, wantToken, wantErr string }{
		{"", "", "http://127.0.0.1:8080", "local-token", ""},
		{"127.0.0.1:8080", "", "http://127.0.0.1:8080", "local-token", ""},
		{"http://localhost:8080/", "", "http://localhost:8080", "local-token", ""},
		{"http://localhost:8080", "given", "http://localhost:8080", "given", ""},
		{"http://sless.example.com:8080", "", "", "", "no API token for http://sless.example.com:8080: set SLESS_TOKEN"},
		{"127.0.0.1:9999", "", "", "", "no API token for http://127.0.0.1:9999"},
	} {
		t.Setenv("SLESS_ENDPOINT", tc.endpoint)
		t.Setenv("SLESS_TOKEN", tc.token)
		c, err := FromEnv()
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("SLESS_ENDPOINT=%q: got %v, want an error with %q", tc.endpoint, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("SLESS_ENDPOINT=%q SLESS_TOKEN=%q: %v", tc.endpoint, tc.token, err)
		case c.Endpoint != tc.wantEndpoint || c.Token != tc.wantToken:
			t.Errorf("SLESS_ENDPOINT=%q SLESS_TOKEN=%q: got %q with token %q, want %q with %q", tc.endpoint, tc.token, c.Endpoint, c.Token, tc.wantEndpoint, tc.wantToken)
		}
	}
}

// A server that is not running is told as such, not as a dial error alone.
func TestCallToAStoppedServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there any more
	c := &Client{Endpoint: endpoint, Token: "token"}
	_, err = c.Whoami(t.Context())
	if err == nil || !strings.Contains(err.Error(), "no sless server is listening at "+endpoint) {
		t.Errorf("Whoami of a stopped server: got %v, want it to say no server listens at %s", err, endpoint)
	}
}
