package sandbox

import (
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
