package sandbox

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
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
