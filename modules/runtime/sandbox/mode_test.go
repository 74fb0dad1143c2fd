package sandbox

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseMode(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Mode
		ok   bool
	}{{"auto", ModeAuto, true}, {"require", ModeRequire, true}, {"off", ModeOff, true}, {"on", "", false}, {"", "", false}} {
		got, err := ParseMode(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("ParseMode(%q) = %q, %v; want %q, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// A binary that cannot run the init (here: one whose main did not call
// Init) gets no sandbox: auto says why, require refuses.
func TestUnavailableSandbox(t *testing.T) {
	saved := handlesInit
	handlesInit = false
	defer func() { handlesInit = saved }()

	sb, reason, err := New(Config{Mode: ModeAuto})
	if sb != nil || err != nil || !strings.Contains(reason, InitCommand) {
		t.Errorf("auto: got %v, %q, %v; want no sandbox and a reason naming %s", sb, reason, err, InitCommand)
	}
	sb, _, err = New(Config{Mode: ModeRequire})
	if sb != nil || err == nil || !strings.Contains(err.Error(), "required") {
		t.Errorf("require: got %v, %v; want an error", sb, err)
	}
	if sb, _, err := New(Config{}); sb != nil || err != nil {
		t.Errorf("off: got %v, %v; want no sandbox and no error", sb, err)
	}
}

// Two process trees never share a uid: a full range is an error, and a freed
// uid is given again.
func TestUIDsAreNeverShared(t *testing.T) {
	s := &Sandbox{cfg: Config{FirstUID: 300000, UIDs: 2}, used: map[int]bool{}}
	a, freeA, err := s.allocUID()
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := s.allocUID()
	if err != nil || b == a {
		t.Fatalf("second uid %d (%v), first %d", b, err, a)
	}
	if _, _, err := s.allocUID(); !errors.Is(err, ErrNoUID) {
		t.Errorf("third uid of two: %v, want ErrNoUID", err)
	}
	freeA()
	if c, _, err := s.allocUID(); err != nil || c != a {
		t.Errorf("after freeing %d: got %d, %v", a, c, err)
	}
}

// The root mode needs root with the capabilities to switch uids, give files
// away and mount; anything less is the rootless mode, and says why.
func TestRootPrivilege(t *testing.T) {
	all := uint64(1)<<unix.CAP_SETUID | 1<<unix.CAP_SETGID | 1<<unix.CAP_CHOWN | 1<<unix.CAP_SYS_ADMIN
	for _, tt := range []struct {
		euid int
		caps uint64
		root bool
		why  string
	}{
		{0, ^uint64(0), true, ""},
		{0, all, true, ""},
		{0, all &^ (1 << unix.CAP_SYS_ADMIN), false, "runs as root without CAP_SYS_ADMIN"},
		{0, 0, false, "runs as root without CAP_CHOWN, CAP_SETGID, CAP_SETUID, CAP_SYS_ADMIN"},
		{1000, all, false, "runs as uid 1000, not root"},
		{1000, 0, false, "runs as uid 1000, not root"},
	} {
		root, why := rootPrivilege(tt.euid, tt.caps)
		if root != tt.root || !strings.Contains(why, tt.why) {
			t.Errorf("rootPrivilege(%d, %#x) = %v, %q; want %v, %q", tt.euid, tt.caps, root, why, tt.root, tt.why)
		}
	}
}

// Root without those capabilities gets no rootless sandbox either: mapped to
// uid 0 of its namespace, the program would keep that namespace's
// capabilities.
func TestRootlessRefusesUID0(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs uid 0")
	}
	s := &Sandbox{cfg: Config{TmpMB: 1}, userNS: true, used: map[int]bool{}}
	if err := s.probe("the server runs as root without CAP_SYS_ADMIN"); err == nil || !strings.Contains(err.Error(), "ordinary user") {
		t.Errorf("probe as uid 0 in a user namespace: %v; want a refusal", err)
	}
}
