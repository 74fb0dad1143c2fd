package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
)

// netProbePy connects to each probe's address (or resolves its name) from
// inside a handler and answers, per probe, "ok", "timeout" or the errno's
// name (EPERM for a destination the egress filter denies).
const netProbePy = `import errno, socket

def handle(event, context):
    if event.get("mode") == "hello":
        return "hello"
    return [probe(p["kind"], p["addr"]) for p in event["probes"]]

def probe(kind, addr):
    try:
        if kind == "resolve":
            socket.getaddrinfo(addr, 443)
            return "ok"
        if kind == "unix":
            s = socket.socket(socket.AF_UNIX)
            target = "\0" + addr[1:] if addr.startswith("@") else addr
        else:
            host, port = addr.rsplit(":", 1)
            host = host.strip("[]")
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            s = socket.socket(family, socket.SOCK_DGRAM if kind == "udp" else socket.SOCK_STREAM)
            target = (host, int(port))
        s.settimeout(2)
        try:
            s.connect(target)
        finally:
            s.close()
        return "ok"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
`

// netProbeJS is the same in Node.js, for TCP.
const netProbeJS = `const net = require("net");
function probe(p) {
  return new Promise((resolve) => {
    const i = p.addr.lastIndexOf(":");
    const s = net.connect({ host: p.addr.slice(0, i).replace(/^\[|\]$/g, ""), port: Number(p.addr.slice(i + 1)) });
    const timer = setTimeout(() => { s.destroy(); resolve("timeout"); }, 2000);
    s.on("connect", () => { clearTimeout(timer); s.destroy(); resolve("ok"); });
    s.on("error", (e) => { clearTimeout(timer); resolve(e.code || e.message); });
  });
}
exports.handle = async (event) => event.mode === "hello" ? "hello" : Promise.all(event.probes.map(probe));
`

// netProbe is one connection attempt of a probe function.
type netProbe struct {
	Kind string `json:"kind"` // tcp, udp, unix or resolve
	Addr string `json:"addr"` // host:port, a unix path (@name: abstract) or a host name
	// what names the destination in failures.
	what string
}

// runNetProbes invokes fn with the probes and returns each one's result.
func (s *server) runNetProbes(t *testing.T, fn string, probes []netProbe) []string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"probes": probes})
	code, _, out := s.post("/fn/default/"+fn, string(body))
	var results []string
	if code != 200 || json.Unmarshal([]byte(out), &results) != nil || len(results) != len(probes) {
		t.Fatalf("%s: %d %s", fn, code, out)
	}
	return results
}

// hostListeners opens what public egress must keep an instance from: a TCP
// listener on 127.0.0.1 and one on [::1], and an abstract unix socket. They
// accept and close connections until the test ends.
func hostListeners(t *testing.T) []netProbe {
	t.Helper()
	var probes []netProbe
	for _, l := range []struct{ network, addr, what string }{
		{"tcp4", "127.0.0.1:0", "a TCP listener on 127.0.0.1"},
		{"tcp6", "[::1]:0", "a TCP listener on [::1]"},
		{"unix", fmt.Sprintf("@sless-e2e-egress-%d", os.Getpid()), "an abstract unix socket of the host"},
	} {
		ln, err := net.Listen(l.network, l.addr)
		if err != nil {
			t.Logf("no %s here: %v", l.what, err)
			continue
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		kind := "tcp"
		if l.network == "unix" {
			kind = "unix"
		}
		probes = append(probes, netProbe{Kind: kind, Addr: ln.Addr().String(), what: l.what})
	}
	return probes
}

// firstNameserver returns the first name server of /etc/resolv.conf.
func firstNameserver(t *testing.T) (netip.Addr, bool) {
	t.Helper()
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return netip.Addr{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 2 && fields[0] == "nameserver" {
			a, err := netip.ParseAddr(fields[1])
			return a.WithZone(""), err == nil
		}
	}
	return netip.Addr{}, false
}

// Public egress keeps an instance from the host and private networks,
// loopback, the server's own port and abstract unix sockets included, while
// DNS and public addresses stay reachable; egress "all" reaches all of it,
// and --instance-egress public overrides a function's "all".
func TestPublicEgress(t *testing.T) {
	s := startServer(t, serverOptions{})
	logs := s.logs.String()
	if !strings.Contains(logs, "instances and builds are sandboxed") {
		t.Skip("the server runs without the sandbox here (needs root): " + firstLine(logs, "not sandboxed"))
	}
	if strings.Contains(logs, "public egress is unavailable") {
		t.Skip("public egress is unavailable here: " + firstLine(logs, "public egress is unavailable"))
	}
	refusesAbstract := strings.Contains(logs, "abstract unix sockets refused")

	listeners := hostListeners(t)
	// host are the destinations of the host, the server's port (which a
	// restart changes) included.
	host := func() []netProbe {
		return append(append([]netProbe{}, listeners...),
			netProbe{Kind: "tcp", Addr: strings.TrimPrefix(s.endpoint, "http://"), what: "the sless server's own port"})
	}
	// TEST-NET-2: no one answers there, but the filter lets it through.
	public := netProbe{Kind: "tcp", Addr: "198.51.100.1:9", what: "a public address"}
	var dns []netProbe
	if ns, ok := firstNameserver(t); ok {
		dns = append(dns, netProbe{Kind: "udp", Addr: netip.AddrPortFrom(ns, 53).String(), what: "DNS to the name server"})
	}
	// A name the host resolves (the Go module proxy is reachable on these
	// machines) resolves in the instance too.
	if _, err := net.LookupHost("proxy.golang.org"); err == nil {
		dns = append(dns, netProbe{Kind: "resolve", Addr: "proxy.golang.org", what: "resolving a name"})
	}

	s.mustCLI("deploy", writeTree(t, map[string]string{"handler.py": netProbePy}), "--name", "pub-py", "--runtime", "python3.11", "--egress", "public")
	s.mustCLI("deploy", writeTree(t, map[string]string{"handler.js": netProbeJS}), "--name", "pub-js", "--runtime", "nodejs20", "--egress", "public")
	s.mustCLI("deploy", writeTree(t, map[string]string{"handler.py": netProbePy}), "--name", "open-py", "--runtime", "python3.11")
	for name, want := range map[string]string{"pub-py": "public", "pub-js": "public", "open-py": "all"} {
		if _, fn := s.getFunction("default", name); fn.Egress != want {
			t.Errorf("GET %s: egress %q, want %q", name, fn.Egress, want)
		}
	}

	// denied checks that fn cannot reach the host's destinations and can
	// reach the others, and still works afterwards.
	denied := func(t *testing.T, fn string) {
		t.Helper()
		var probes []netProbe
		for _, p := range host() {
			// Node 20 cannot name an abstract socket (it cuts the path
			// at the NUL byte).
			if p.Kind != "unix" || !strings.HasSuffix(fn, "-js") {
				probes = append(probes, p)
			}
		}
		nDenied := len(probes)
		probes = append(probes, public)
		if !strings.HasSuffix(fn, "-js") { // the Node.js probe does TCP only
			probes = append(probes, dns...)
		}
		for i, got := range s.runNetProbes(t, fn, probes) {
			p := probes[i]
			t.Logf("%s: %s (%s %s): %s", fn, p.what, p.Kind, p.Addr, got)
			switch wantDenied := i < nDenied; {
			case p.Kind == "unix" && !refusesAbstract:
				t.Logf("%s: %s: %s (this kernel has no unix socket hooks)", fn, p.what, got)
			case wantDenied && got != "EPERM":
				t.Errorf("%s reached %s (%s): %s; want EPERM", fn, p.what, p.Addr, got)
			case !wantDenied && got == "EPERM", p.Kind == "resolve" && got != "ok":
				t.Errorf("%s was denied %s (%s): %s", fn, p.what, p.Addr, got)
			}
		}
		if code, _, out := s.post("/fn/default/"+fn, `{"mode": "hello"}`); code != 200 || out != `"hello"` {
			t.Errorf("%s after the probes: %d %s", fn, code, out)
		}
	}
	for _, fn := range []string{"pub-py", "pub-js"} {
		t.Run(fn, func(t *testing.T) { denied(t, fn) })
	}

	t.Run("egress all reaches the host", func(t *testing.T) {
		probes := host()
		for i, got := range s.runNetProbes(t, "open-py", probes) {
			if got != "ok" {
				t.Errorf("open-py: %s (%s): %s; want ok", probes[i].what, probes[i].Addr, got)
			}
		}
	})

	t.Run("--instance-egress public applies to every function", func(t *testing.T) {
		s.opts.env = append(s.opts.env, "SLESS_INSTANCE_EGRESS=public")
		s.stop()
		s.start()
		if line := firstLine(s.logs.String(), "instances and builds are sandboxed"); !strings.Contains(line, "public for every function") {
			t.Errorf("the start-up log does not say that egress is public for every function: %s", line)
		}
		s.waitFor("open-py answering", func() bool { code, _, _ := s.post("/fn/default/open-py", `{"mode": "hello"}`); return code == 200 })
		denied(t, "open-py")
	})
}

// Where public egress cannot be enforced (here: without the sandbox), a
// function that asks for it is Failed and says why, and a server asked to
// enforce it for every instance refuses to start.
func TestPublicEgressUnavailable(t *testing.T) {
	s := startServer(t, serverOptions{env: []string{"SLESS_SANDBOX=off"}})
	if !strings.Contains(firstLine(s.logs.String(), "not sandboxed"), "public egress is unavailable") {
		t.Errorf("the start-up log does not say that public egress is unavailable:\n%s", firstLine(s.logs.String(), "not sandboxed"))
	}
	if _, stderr, err := s.cli("deploy", writeTree(t, map[string]string{"handler.py": netProbePy}), "--name", "pub", "--runtime", "python3.11",
		"--egress", "public"); err == nil {
		t.Errorf("deploy of a function with public egress succeeded without the sandbox; stderr: %s", stderr)
	}
	fn := s.waitFunction("default", "pub", "Failed", func(fn function) bool { return fn.Status.Phase == "Failed" })
	if want := `egress "public" is not available on this server: instances are not sandboxed`; !strings.Contains(fn.Status.Message, want) {
		t.Errorf("status message %q; want it to contain %q", fn.Status.Message, want)
	}
	if code, _, out := s.post("/fn/default/pub", `{"mode": "hello"}`); code == 200 {
		t.Errorf("the function runs with an open network: %d %s", code, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "server", "--listen", "127.0.0.1:"+testenv.FreePort(t), "--data-dir", t.TempDir())
	cmd.Env = append(cleanEnv(), "SLESS_SANDBOX=off", "SLESS_INSTANCE_EGRESS=public")
	out, err := cmd.CombinedOutput()
	if want := "public egress for every instance is required but unavailable"; err == nil || !strings.Contains(string(out), want) {
		t.Errorf("a server with --instance-egress public and no sandbox: %v\n%s\nwant it to refuse to start saying %q", err, out, want)
	}
}
