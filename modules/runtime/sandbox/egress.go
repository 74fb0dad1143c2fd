package sandbox

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"sless.kube5s.ru/sless/modules/runtime"
)

// embeddings are the IPv6 prefixes that carry an IPv4 address at a byte
// offset, and so reach that IPv4 address: the IPv4 ranges of
// runtime.DeniedPrefixes are denied in these forms too.
var embeddings = []struct {
	prefix netip.Prefix
	at     int
}{
	{netip.MustParsePrefix("::ffff:0:0/96"), 12},
	{netip.MustParsePrefix("64:ff9b::/96"), 12},
	{netip.MustParsePrefix("2002::/16"), 2},
}

// EgressPolicy is what public egress denies on one server.
type EgressPolicy struct {
	// Deny are the denied ranges: runtime.DeniedPrefixes and the host's own
	// addresses.
	Deny []netip.Prefix
	// DNS are the name servers that stay reachable on port 53, UDP and TCP.
	DNS []netip.Addr
}

// HostEgressPolicy is runtime.DeniedPrefixes plus the addresses of the host's
// network interfaces (which reach the host's services as loopback does),
// with the name servers of resolvConf (usually /etc/resolv.conf) allowed on
// port 53. Both are read once: an address the host gains later is not
// denied.
func HostEgressPolicy(resolvConf string) (EgressPolicy, error) {
	p := EgressPolicy{Deny: slices.Clone(runtime.DeniedPrefixes)}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return p, fmt.Errorf("listing the host's addresses: %w", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				p.Deny = append(p.Deny, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			}
		}
	}
	f, err := os.Open(resolvConf)
	if err != nil {
		return p, fmt.Errorf("reading the name servers: %w", err)
	}
	defer f.Close()
	p.DNS = nameservers(f)
	return p, nil
}

// nameservers returns the name servers of a resolv.conf; with none, the C
// library asks the host's loopback, and so does this list.
func nameservers(r io.Reader) []netip.Addr {
	var out []netip.Addr
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				out = append(out, a.WithZone("").Unmap())
			}
		}
	}
	if len(out) == 0 {
		out = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
	}
	return out
}

// Describe is the policy in a few words, for the start-up log.
func (p EgressPolicy) Describe() string {
	dns := make([]string, len(p.DNS))
	for i, a := range p.DNS {
		dns[i] = a.String()
	}
	return fmt.Sprintf("loopback, private, link-local, shared, multicast and reserved ranges and the host's %d addresses denied, "+
		"DNS to %s allowed", len(p.Deny)-len(runtime.DeniedPrefixes), strings.Join(dns, ", "))
}

// EgressFilter denies the destinations of an EgressPolicy to the processes
// of the cgroups it is attached to, with cgroup BPF programs: connect(2) and
// sendmsg(2) to a denied address fail at once with EPERM, and so does
// creating an IPv4 or IPv6 socket of another protocol than TCP or UDP (ICMP
// "ping" sockets, SCTP), whose traffic the programs would not see. On kernels
// with the unix socket hooks (6.7) it refuses abstract unix sockets too
// (those are shared by every process of the host's network namespace).
// It is safe for concurrent use.
type EgressFilter struct {
	policy EgressPolicy
	hooks  []hook
	// unix says whether abstract unix sockets are refused.
	unix bool
}

type hook struct {
	attach ebpf.AttachType
	prog   *ebpf.Program
}

// ErrEgressNeedsRoot is NewEgressFilter's error in a server that does not
// run as root.
var ErrEgressNeedsRoot = errors.New("the server does not run as root (needed to load cgroup BPF programs)")

// NewEgressFilter loads the programs of policy. It fails with
// ErrEgressNeedsRoot, or when the kernel lacks the hooks or refuses a
// program.
func NewEgressFilter(policy EgressPolicy) (*EgressFilter, error) {
	if os.Geteuid() != 0 {
		return nil, ErrEgressNeedsRoot
	}
	f := &EgressFilter{policy: policy}
	inet4, inet6 := inetProgram(policy, false), inetProgram(policy, true)
	specs := []*ebpf.ProgramSpec{
		{Name: "sless_conn4", Type: ebpf.CGroupSockAddr, AttachType: ebpf.AttachCGroupInet4Connect, Instructions: inet4},
		{Name: "sless_send4", Type: ebpf.CGroupSockAddr, AttachType: ebpf.AttachCGroupUDP4Sendmsg, Instructions: inet4},
		{Name: "sless_conn6", Type: ebpf.CGroupSockAddr, AttachType: ebpf.AttachCGroupInet6Connect, Instructions: inet6},
		{Name: "sless_send6", Type: ebpf.CGroupSockAddr, AttachType: ebpf.AttachCGroupUDP6Sendmsg, Instructions: inet6},
		{Name: "sless_sock", Type: ebpf.CGroupSock, AttachType: ebpf.AttachCGroupInetSockCreate, Instructions: sockProgram()},
	}
	for _, s := range specs {
		if err := f.load(s); err != nil {
			f.Close()
			return nil, fmt.Errorf("the kernel refused the network filter (%s): %w", s.Name, err)
		}
	}
	// Without the unix hooks (or the kernel's BTF they need), IP is still
	// filtered; Describe says what is missing.
	if unix, err := unixProgram(); err == nil {
		f.unix = f.load(&ebpf.ProgramSpec{Name: "sless_connu", Type: ebpf.CGroupSockAddr, AttachType: ebpf.AttachCgroupUnixConnect, Instructions: unix}) == nil &&
			f.load(&ebpf.ProgramSpec{Name: "sless_sendu", Type: ebpf.CGroupSockAddr, AttachType: ebpf.AttachCgroupUnixSendmsg, Instructions: unix}) == nil
	}
	return f, nil
}

func (f *EgressFilter) load(s *ebpf.ProgramSpec) error {
	// kfunc calls (the unix program) need a GPL-compatible license.
	s.License = "GPL"
	prog, err := ebpf.NewProgram(s)
	if err != nil {
		return err
	}
	f.hooks = append(f.hooks, hook{s.AttachType, prog})
	return nil
}

// Describe lists what the filter denies, for the start-up log.
func (f *EgressFilter) Describe() string {
	unix := "abstract unix sockets refused"
	if !f.unix {
		unix = "abstract unix sockets not refused (the kernel lacks the unix socket hooks of 6.7 or its BTF)"
	}
	return f.policy.Describe() + ", only TCP and UDP sockets, " + unix
}

// RefusesAbstractUnix reports whether the filter refuses abstract unix
// sockets.
func (f *EgressFilter) RefusesAbstractUnix() bool { return f.unix }

// Attach applies the filter to the processes of the cgroup v2 directory dir,
// and to the sockets they create from now on. Detach (or removing the
// cgroup) undoes it. It costs one system call per hook.
func (f *EgressFilter) Attach(dir string) (detach func(), err error) {
	var links []link.Link
	detach = func() {
		for _, l := range links {
			l.Close()
		}
	}
	for _, h := range f.hooks {
		l, err := link.AttachCgroup(link.CgroupOptions{Path: dir, Attach: h.attach, Program: h.prog})
		if err != nil {
			detach()
			return nil, fmt.Errorf("attaching the network filter to the instance's cgroup: %w", err)
		}
		links = append(links, l)
	}
	return detach, nil
}

// Close unloads the programs; attachments keep theirs until detached.
func (f *EgressFilter) Close() {
	for _, h := range f.hooks {
		h.prog.Close()
	}
}

// Offsets in struct bpf_sock_addr (the context of connect and sendmsg
// programs) and struct bpf_sock (sock_create), from linux/bpf.h.
const (
	offUserIP4  = 4
	offUserIP6  = 8
	offUserPort = 24
	offProtocol = 12 // in bpf_sock
)

// Verdicts of cgroup programs.
const (
	verdictDeny  = 0
	verdictAllow = 1
)

// Protocol numbers, from netinet/in.h.
const (
	protoTCP = 6
	protoUDP = 17
)

// builder emits instructions and places labels on the next one.
type builder struct {
	insns   asm.Instructions
	pending string
	labels  int
}

func (b *builder) emit(ins ...asm.Instruction) {
	for _, in := range ins {
		if b.pending != "" {
			in = in.WithSymbol(b.pending)
			b.pending = ""
		}
		b.insns = append(b.insns, in)
	}
}

// newLabel returns a fresh label name.
func (b *builder) newLabel() string {
	b.labels++
	return fmt.Sprintf("l%d", b.labels)
}

// place makes name the label of the next instruction.
func (b *builder) place(name string) {
	if b.pending != "" {
		// Two labels at one place: the first goes on a no-op.
		b.emit(asm.Mov.Imm(asm.R0, 0))
	}
	b.pending = name
}

// word is the value a 4-byte load of the address bytes b gives: the context
// holds addresses in network byte order.
func word(b []byte) int32 { return int32(binary.NativeEndian.Uint32(b)) }

// match jumps to label when the address in words (one register per 32 bits,
// as loaded from the context) is in p; then, when port is set, only if the
// port register holds it too.
func (b *builder) match(words []asm.Register, p netip.Prefix, portReg asm.Register, port int32, label string) {
	addr := p.Addr().AsSlice()
	mask := net.CIDRMask(p.Bits(), len(addr)*8)
	n := (p.Bits() + 31) / 32
	next := b.newLabel()
	for i := range n {
		m, v := word(mask[4*i:4*i+4]), word(addr[4*i:4*i+4])&word(mask[4*i:4*i+4])
		reg := words[i]
		if m != -1 {
			b.emit(asm.Mov.Reg32(asm.R8, reg), asm.And.Imm32(asm.R8, m))
			reg = asm.R8
		}
		if port != 0 || i < n-1 {
			b.emit(asm.JNE.Imm32(reg, v, next))
		} else {
			b.emit(asm.JEq.Imm32(reg, v, label))
		}
	}
	if port != 0 {
		b.emit(asm.JEq.Imm32(portReg, port, label))
	}
	if n > 1 || port != 0 {
		b.place(next)
	}
}

// inetProgram is the connect/sendmsg program of one address family: allow
// DNS to the policy's name servers, deny the denied ranges, allow the rest.
func inetProgram(p EgressPolicy, v6 bool) asm.Instructions {
	b := &builder{}
	words := []asm.Register{asm.R2}
	b.emit(asm.Mov.Reg(asm.R6, asm.R1), asm.LoadMem(asm.R7, asm.R6, offUserPort, asm.Word))
	if v6 {
		words = []asm.Register{asm.R2, asm.R3, asm.R4, asm.R5}
		for i, r := range words {
			b.emit(asm.LoadMem(r, asm.R6, int16(offUserIP6+4*i), asm.Word))
		}
	} else {
		b.emit(asm.LoadMem(asm.R2, asm.R6, offUserIP4, asm.Word))
	}
	dnsPort := int32(binary.NativeEndian.Uint16([]byte{0, 53}))
	for _, a := range p.DNS {
		for _, q := range forFamily(netip.PrefixFrom(a, a.BitLen()), v6) {
			b.match(words, q, asm.R7, dnsPort, "allow")
		}
	}
	for _, d := range p.Deny {
		for _, q := range forFamily(d, v6) {
			b.match(words, q, 0, 0, "deny")
		}
	}
	b.place("allow")
	b.emit(asm.Mov.Imm(asm.R0, verdictAllow), asm.Return())
	b.place("deny")
	b.emit(asm.Mov.Imm(asm.R0, verdictDeny), asm.Return())
	return b.insns
}

// forFamily returns the prefixes of the v6 (or v4) address space that reach
// what p does: p itself if of that family, and for an IPv4 p in IPv6 its
// embedded forms.
func forFamily(p netip.Prefix, v6 bool) []netip.Prefix {
	if p.Addr().Is6() {
		if v6 {
			return []netip.Prefix{p}
		}
		return nil
	}
	if !v6 {
		return []netip.Prefix{p}
	}
	out := make([]netip.Prefix, len(embeddings))
	v4 := p.Addr().As4()
	for i, e := range embeddings {
		a := e.prefix.Addr().As16()
		copy(a[e.at:], v4[:])
		out[i] = netip.PrefixFrom(netip.AddrFrom16(a), e.at*8+p.Bits())
	}
	return out
}

// sockProgram allows only TCP and UDP among IPv4 and IPv6 sockets (the
// program runs for no other family).
func sockProgram() asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, offProtocol, asm.Word),
		asm.Mov.Imm(asm.R0, verdictAllow),
		asm.JEq.Imm32(asm.R2, protoTCP, "out"),
		asm.JEq.Imm32(asm.R2, protoUDP, "out"),
		asm.Mov.Imm(asm.R0, verdictDeny),
		asm.Return().WithSymbol("out"),
	}
}

// unixProgram refuses abstract addresses (sun_path starting with a NUL byte)
// to connect and sendmsg on unix sockets. The address is only reachable
// through the kernel's own context (bpf_cast_to_kern_ctx), whose layout
// comes from the kernel's BTF.
func unixProgram() (asm.Instructions, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, err
	}
	var cast *btf.Func
	if err := spec.TypeByName("bpf_cast_to_kern_ctx", &cast); err != nil {
		return nil, err
	}
	castID, err := spec.TypeID(cast)
	if err != nil {
		return nil, err
	}
	var kern *btf.Struct
	if err := spec.TypeByName("bpf_sock_addr_kern", &kern); err != nil {
		return nil, err
	}
	off := map[string]int16{}
	for _, m := range kern.Members {
		off[m.Name] = int16(m.Offset.Bytes())
	}
	for _, name := range []string{"uaddr", "uaddrlen"} {
		if _, ok := off[name]; !ok {
			return nil, fmt.Errorf("the kernel's bpf_sock_addr_kern has no %s", name)
		}
	}
	// offsetof(struct sockaddr_un, sun_path) on Linux.
	const sunPath = 2
	return asm.Instructions{
		asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call), Src: asm.PseudoKfuncCall, Constant: int64(castID)},
		asm.LoadMem(asm.R2, asm.R0, off["uaddrlen"], asm.Word),
		asm.JLE.Imm32(asm.R2, sunPath, "allow"),
		asm.LoadMem(asm.R3, asm.R0, off["uaddr"], asm.DWord),
		asm.LoadMem(asm.R4, asm.R3, sunPath, asm.Byte),
		asm.JEq.Imm32(asm.R4, 0, "deny"),
		asm.Mov.Imm(asm.R0, verdictAllow).WithSymbol("allow"),
		asm.Return(),
		asm.Mov.Imm(asm.R0, verdictDeny).WithSymbol("deny"),
		asm.Return(),
	}, nil
}

// CgroupV2Dir returns the directory of the calling process's cgroup on the
// cgroup v2 hierarchy: /sys/fs/cgroup/... on a cgroup v2 machine,
// /sys/fs/cgroup/unified/... on a hybrid one, where the v1 hierarchies hold
// the controllers.
func CgroupV2Dir() (string, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	rel, found := "", false
	for line := range strings.SplitSeq(string(self), "\n") {
		if r, ok := strings.CutPrefix(line, "0::"); ok {
			rel, found = r, true
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(mounts), "\n") {
		// "30 23 0:26 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw"
		pre, post, _ := strings.Cut(line, " - ")
		a, b := strings.Fields(pre), strings.Fields(post)
		if found && len(a) >= 5 && len(b) >= 1 && b[0] == "cgroup2" {
			return filepath.Join(a[4], strings.TrimPrefix(rel, a[3])), nil
		}
	}
	return "", errors.New("no cgroup v2 hierarchy is mounted")
}
