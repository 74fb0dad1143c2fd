package sandbox

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

func TestNameservers(t *testing.T) {
	for _, tt := range []struct{ conf, want string }{
		{"nameserver 10.255.255.53\n", "10.255.255.53"},
		{"# local\nsearch example.org\nnameserver 127.0.0.53\nnameserver fe80::1%eth0\nnameserver ::ffff:192.168.1.1\noptions edns0\n",
			"127.0.0.53 fe80::1 192.168.1.1"},
		{"nameserver not-an-address\n", "127.0.0.1 ::1"},
		{"", "127.0.0.1 ::1"},
	} {
		var got []string
		for _, a := range nameservers(strings.NewReader(tt.conf)) {
			got = append(got, a.String())
		}
		if g := strings.Join(got, " "); g != tt.want {
			t.Errorf("nameservers(%q) = %s; want %s", tt.conf, g, tt.want)
		}
	}
}

// An IPv4 range is denied in IPv6 in each form that reaches it.
func TestForFamily(t *testing.T) {
	p := netip.MustParsePrefix("10.0.0.0/8")
	if got := forFamily(p, false); !slices.Equal(got, []netip.Prefix{p}) {
		t.Errorf("IPv4 forms of %s: %v", p, got)
	}
	want := []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104"), netip.MustParsePrefix("64:ff9b::a00:0/104"),
		netip.MustParsePrefix("2002:a00::/24")}
	if got := forFamily(p, true); !slices.Equal(got, want) {
		t.Errorf("IPv6 forms of %s: %v; want %v", p, got, want)
	}
	if got := forFamily(netip.MustParsePrefix("fc00::/7"), false); got != nil {
		t.Errorf("IPv4 forms of fc00::/7: %v; want none", got)
	}
}

// BenchmarkEgressConnect measures what the filter adds to connect(2): a UDP
// socket connected again and again to an allowed address (which runs every
// rule of the program), interleaved with one of an unfiltered cgroup, so
// that both see the same load. A socket belongs to the cgroup its creator
// was in. It reports both connects' ns, their difference, and the
// program's own run time from the kernel's BPF statistics.
func BenchmarkEgressConnect(b *testing.B) {
	f, home := benchFilter(b)
	dir := filepath.Join(home, fmt.Sprintf("sless-egress-bench-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	defer os.Remove(dir)
	detach, err := f.Attach(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer detach()
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()

	// socket creates a socket while the whole process is in cgroup in.
	socket := func(family int, in string) int {
		if err := os.WriteFile(filepath.Join(in, "cgroup.procs"), []byte(fmt.Sprint(os.Getpid())), 0o644); err != nil {
			b.Fatal(err)
		}
		fd, err := unix.Socket(family, unix.SOCK_DGRAM, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	for _, dst := range []struct {
		name   string
		family int
		sa     unix.Sockaddr
		attach ebpf.AttachType
	}{
		{"udp4", unix.AF_INET, &unix.SockaddrInet4{Port: 9, Addr: [4]byte{198, 51, 100, 1}}, ebpf.AttachCGroupInet4Connect},
		{"udp6", unix.AF_INET6, &unix.SockaddrInet6{Port: 9, Addr: netip.MustParseAddr("2001:db8::1").As16()}, ebpf.AttachCGroupInet6Connect},
	} {
		filtered, open := socket(dst.family, dir), socket(dst.family, home)
		var prog *ebpf.Program
		for _, h := range f.hooks {
			if h.attach == dst.attach {
				prog = h.prog
			}
		}
		b.Run(dst.name, func(b *testing.B) {
			before, err := prog.Stats()
			if err != nil {
				b.Fatal(err)
			}
			var tOpen, tFiltered time.Duration
			for i := range b.N {
				// Alternate which goes first.
				for k := range 2 {
					fd, total := open, &tOpen
					if (i+k)%2 == 1 {
						fd, total = filtered, &tFiltered
					}
					t0 := time.Now()
					if err := unix.Connect(fd, dst.sa); err != nil {
						b.Fatalf("connect: %v", err)
					}
					*total += time.Since(t0)
				}
			}
			after, err := prog.Stats()
			if err != nil {
				b.Fatal(err)
			}
			n := float64(b.N)
			b.ReportMetric(float64(tOpen.Nanoseconds())/n, "unfiltered-ns/connect")
			b.ReportMetric(float64(tFiltered.Nanoseconds())/n, "filtered-ns/connect")
			b.ReportMetric(float64((tFiltered-tOpen).Nanoseconds())/n, "added-ns/connect")
			if runs := after.RunCount - before.RunCount; runs > 0 {
				b.ReportMetric(float64((after.Runtime-before.Runtime).Nanoseconds())/float64(runs), "program-ns/run")
			}
		})
	}
}

// benchFilter returns the host's filter, closed when b ends, and the cgroup
// v2 directory of the benchmark, or skips b where there are none.
func benchFilter(b *testing.B) (*EgressFilter, string) {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("loading cgroup BPF programs needs root")
	}
	policy, err := HostEgressPolicy("/etc/resolv.conf")
	if err != nil {
		b.Fatal(err)
	}
	f, err := NewEgressFilter(policy)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(f.Close)
	home, err := CgroupV2Dir()
	if err != nil {
		b.Skip(err)
	}
	return f, home
}

// BenchmarkEgressAttach measures what applying the filter adds to a cold
// start: attaching every hook to a cgroup and detaching them, as the only
// attachment of the filter (the kernel switches its hooks on and off each
// time) and beside another one (as the executor runs it, with the filter
// attached to an empty cgroup for its life).
func BenchmarkEgressAttach(b *testing.B) {
	filter, home := benchFilter(b)
	mkdir := func(name string) string {
		dir := filepath.Join(home, fmt.Sprintf("sless-egress-bench-%s-%d", name, os.Getpid()))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.Remove(dir) })
		return dir
	}
	dir := mkdir("instance")
	attach := func(b *testing.B) {
		for range b.N {
			detach, err := filter.Attach(dir)
			if err != nil {
				b.Fatal(err)
			}
			detach()
		}
	}
	b.Run("alone", attach)
	detach, err := filter.Attach(mkdir("keeper"))
	if err != nil {
		b.Fatal(err)
	}
	defer detach()
	b.Run("beside-another", attach)
}
