package sandbox_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
)

// probe is one attempt of the helper process: a kind ("udp", "tcp",
// "unix", or "udplite": creating a UDP-Lite socket) and an address.
type probe struct{ Kind, Addr string }

// TestEgressProbeHelper is the process the filter tests start in a cgroup:
// it runs the probes of SLESS_EGRESS_PROBES and prints each one's error
// ("ok", or the errno's name).
func TestEgressProbeHelper(t *testing.T) {
	spec := os.Getenv("SLESS_EGRESS_PROBES")
	if spec == "" {
		t.Skip("run by the egress filter tests")
	}
	var probes []probe
	if err := json.Unmarshal([]byte(spec), &probes); err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(probes))
	for i, p := range probes {
		out[i] = runProbe(p)
	}
	data, _ := json.Marshal(out)
	fmt.Println("RESULT " + string(data))
}

func runProbe(p probe) string {
	var err error
	switch p.Kind {
	case "udplite":
		// A protocol the programs do not see (ICMP "ping" sockets are
		// another, but most hosts allow them to no one).
		var fd int
		fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, syscall.IPPROTO_UDPLITE)
		if err == nil {
			syscall.Close(fd)
		}
	default:
		var c net.Conn
		c, err = net.DialTimeout(p.Kind, p.Addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
	}
	var errno syscall.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &errno):
		return unixErrName(errno)
	default:
		return err.Error()
	}
}

func unixErrName(e syscall.Errno) string {
	if e == syscall.EPERM {
		return "EPERM"
	}
	return fmt.Sprintf("errno %d (%v)", int(e), e)
}

// runProbes runs probes in a process of a new cgroup v2, with filter
// attached unless nil, and returns each probe's result.
func runProbes(t *testing.T, filter *sandbox.EgressFilter, probes []probe) []string {
	t.Helper()
	parent, err := sandbox.CgroupV2Dir()
	if err != nil {
		t.Skip(err)
	}
	dir := filepath.Join(parent, fmt.Sprintf("sless-egress-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(dir)
	if filter != nil {
		detach, err := filter.Attach(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer detach()
	}
	cg, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	spec, _ := json.Marshal(probes)
	cmd := exec.Command(os.Args[0], "-test.run=^TestEgressProbeHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "SLESS_EGRESS_PROBES="+string(spec))
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe process: %v\n%s", err, out)
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if r, ok := strings.CutPrefix(line, "RESULT "); ok {
			var res []string
			if err := json.Unmarshal([]byte(r), &res); err != nil {
				t.Fatal(err)
			}
			return res
		}
	}
	t.Fatalf("no result from the probe process:\n%s", out)
	return nil
}

// TestEgressFilterDeniesByTable checks the programs the kernel runs, not a
// model of them: every address is connected to (UDP connect sends nothing)
// from a process in a filtered cgroup, and a denied one fails with EPERM.
func TestEgressFilterDeniesByTable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading cgroup BPF programs needs root")
	}
	policy := sandbox.EgressPolicy{
		// 203.0.113.7 plays the host's own address.
		Deny: append(append([]netip.Prefix{}, runtime.DeniedPrefixes...), netip.MustParsePrefix("203.0.113.7/32")),
		DNS:  []netip.Addr{netip.MustParseAddr("10.0.0.53"), netip.MustParseAddr("fd00::53")},
	}
	filter, err := sandbox.NewEgressFilter(policy)
	if err != nil {
		t.Fatal(err)
	}
	defer filter.Close()

	denied := []string{
		"0.0.0.0:9", "10.1.2.3:9", "100.64.0.1:9", "100.127.255.254:9", "127.0.0.1:9", "127.255.255.254:9",
		"169.254.169.254:80", "172.16.0.1:9", "172.31.255.255:9", "192.0.0.8:9", "192.168.1.1:9", "198.18.0.1:9",
		"198.19.255.255:9", "224.0.0.251:5353", "239.255.255.250:1900", "240.0.0.1:9", "255.255.255.255:9",
		"203.0.113.7:9",
		// DNS only to the name servers, only on port 53.
		"10.0.0.53:54", "10.0.0.52:53", "[fd00::53]:54",
		"[::1]:9", "[::]:9", "[::ffff:127.0.0.1]:9", "[::ffff:10.0.0.1]:9", "[::ffff:169.254.169.254]:80",
		"[::ffff:203.0.113.7]:9", "[64:ff9b::7f00:1]:9", "[64:ff9b::a00:1]:9", "[64:ff9b:1::1]:9",
		"[2002:7f00:1::1]:9", "[2002:c0a8:101::1]:9", "[fc00::1]:9", "[fd00::1]:9", "[fe80::1]:9", "[febf::1]:9",
		"[fec0::1]:9", "[ff02::1]:9",
	}
	allowed := []string{
		"1.1.1.1:9", "8.8.8.8:53", "11.0.0.1:9", "100.63.255.255:9", "100.128.0.0:9", "126.255.255.255:9",
		"169.253.255.255:9", "172.15.255.255:9", "172.32.0.0:9", "192.0.2.1:9", "192.169.0.0:9", "198.51.100.1:9",
		"203.0.113.8:9", "223.255.255.255:9", "10.0.0.53:53",
		"[2001:db8::1]:9", "[2606:4700::1111]:9", "[::ffff:8.8.8.8]:9", "[64:ff9b::808:808]:9",
		"[2002:808:808::1]:9", "[fbff::1]:9", "[100::1]:9", "[fd00::53]:53", "[::ffff:10.0.0.53]:53",
	}
	var probes []probe
	for _, a := range append(append([]string{}, denied...), allowed...) {
		probes = append(probes, probe{"udp", a})
	}
	// A TCP listener and an abstract and a path unix socket of the host.
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	abstract, err := net.Listen("unix", fmt.Sprintf("@sless-egress-test-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer abstract.Close()
	path, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer path.Close()
	others := []probe{{"tcp", tcp.Addr().String()}, {"unix", abstract.Addr().String()}, {"unix", path.Addr().String()}, {"udplite", ""}}
	probes = append(probes, others...)

	got := runProbes(t, filter, probes)
	for i, p := range probes[:len(denied)+len(allowed)] {
		if wantDenied := i < len(denied); (got[i] == "EPERM") != wantDenied {
			t.Errorf("udp connect %s: %s; want denied %v", p.Addr, got[i], wantDenied)
		}
	}
	rest := got[len(denied)+len(allowed):]
	wantAbstract := "ok"
	if filter.RefusesAbstractUnix() {
		wantAbstract = "EPERM"
	} else {
		t.Log("this kernel has no unix socket hooks: abstract sockets are not refused")
	}
	for i, want := range []string{"EPERM", wantAbstract, "ok", "EPERM"} {
		if rest[i] != want {
			t.Errorf("%s %s: %s; want %s", others[i].Kind, others[i].Addr, rest[i], want)
		}
	}

	// Without the filter, the same process reaches all of them.
	for i, r := range runProbes(t, nil, others) {
		if r != "ok" {
			t.Errorf("unfiltered %s %s: %s; want ok", others[i].Kind, others[i].Addr, r)
		}
	}
}
