package e2e

import (
	"strings"
	"testing"
)

// SLESS_ENDPOINT naming the local server, with or without a scheme, needs no
// SLESS_TOKEN; another server does, and a bad endpoint is told in the CLI's
// own words.
func TestCLIEndpoint(t *testing.T) {
	s := startServer(t, serverOptions{})
	hostPort := strings.TrimPrefix(s.endpoint, "http://")
	port := hostPort[strings.LastIndex(hostPort, ":")+1:]
	for _, endpoint := range []string{s.endpoint, hostPort, "localhost:" + port, s.endpoint + "/"} {
		if out, errOut, err := s.cliWithEnv([]string{"SLESS_ENDPOINT=" + endpoint}, "fn", "list"); err != nil || !strings.Contains(out, "NAME") {
			t.Errorf("SLESS_ENDPOINT=%s without SLESS_TOKEN: %v, stdout %q, stderr %q; want the local server's token used", endpoint, err, out, errOut)
		}
	}
	if out, errOut, err := s.cliWithEnv([]string{"SLESS_ENDPOINT=" + hostPort, "SLESS_TOKEN=" + s.token}, "fn", "list"); err != nil || !strings.Contains(out, "NAME") {
		t.Errorf("SLESS_ENDPOINT=%s with SLESS_TOKEN: %v, stderr %q; want HOST:PORT taken as http://HOST:PORT", hostPort, err, errOut)
	}
	for endpoint, want := range map[string]string{
		"http://192.0.2.1:8080": "set SLESS_TOKEN",
		"ftp://" + hostPort:     "is not a server address",
	} {
		_, errOut, err := s.cliWithEnv([]string{"SLESS_ENDPOINT=" + endpoint}, "fn", "list")
		if err == nil || !strings.Contains(errOut, want) {
			t.Errorf("SLESS_ENDPOINT=%s: %v, stderr %q; want an error saying %q", endpoint, err, errOut, want)
		}
	}
}

// deploy --http=false and fn get print how to invoke the function, not a
// /fn URL that answers 404.
func TestDeployWithoutHTTP(t *testing.T) {
	s := startServer(t, serverOptions{})
	out := s.mustCLI("deploy", "../examples/hello-python", "--name", "private", "--runtime", "python3.11", "--http=false")
	if strings.Contains(out, "/fn/") || !strings.HasPrefix(out, "sless invoke private") {
		t.Errorf("deploy --http=false printed %q; want the command that invokes it, not a /fn URL", out)
	}
	if detail := s.mustCLI("fn", "get", "private"); strings.Contains(detail, "/fn/") || !strings.Contains(detail, "sless invoke private") {
		t.Errorf("fn get of a function without an http trigger:\n%s\nwant the command that invokes it, not a /fn URL", detail)
	}
	if got := s.mustCLI("invoke", "private", "-d", `{"name": "cli"}`); !strings.Contains(got, "Hello, cli!") {
		t.Errorf("sless invoke private answered %q", got)
	}
	if code, _, _ := s.post("/fn/default/private", `{}`); code != 404 {
		t.Errorf("/fn of a function deployed with --http=false: HTTP %d, want 404", code)
	}
}
