package sandbox

import (
	"errors"
	"strings"
	"testing"
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
