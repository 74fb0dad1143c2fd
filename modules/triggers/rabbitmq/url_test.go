package rabbitmq

import (
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"amqp://user:secret@host:5672/vh", "amqp://user:***@host:5672/vh"},
		{"amqps://user:se%40cret@host/", "amqps://user:***@host/"},
		{"amqp://user:secret@host/vh?heartbeat=5", "amqp://user:***@host/vh?heartbeat=5"},
		{"amqp://:secret@host/", "amqp://:***@host/"},
		{"amqp://us%20er:secret@host/%2F", "amqp://us%20er:***@host/%2F"},
		{"amqp://user@host/", "amqp://user@host/"},
		{"amqp://host", "amqp://host"},
		{"", ""},
		{"amqp://user:secret@host:port/", invalidURL},              // a bad port
		{"amqp://user:sec ret@host/", invalidURL},                  // a space in the userinfo
		{"amqp://user:sec%zzret@host/", invalidURL},                // a bad escape
		{"user:secret@host", invalidURL},                           // opaque: scheme "user"
		{"amqp://user:secret@", invalidURL},                        // no host
		{"amqp://user:p@ss:secret@host/", "amqp://user:***@host/"}, // the last @ ends the userinfo
		{"amqp://user:secret@host/path#frag", "amqp://user:***@host/path#frag"},
	} {
		got := RedactURL(tc.in)
		if got != tc.want {
			t.Errorf("RedactURL(%q) = %q; want %q", tc.in, got, tc.want)
		}
		if strings.Contains(got, "secret") || strings.Contains(got, "cret") {
			t.Errorf("RedactURL(%q) = %q leaks the password", tc.in, got)
		}
	}
}

func TestValidateURL(t *testing.T) {
	for _, ok := range []string{
		"amqp://user:secret@host/vh",
		"amqps://host",
		"amqp://user:secret@127.0.0.1:5672/%2F",
		"amqp://user:secret@host/vh?heartbeat=5",
	} {
		if err := ValidateURL(ok); err != nil {
			t.Errorf("ValidateURL(%q) = %v; want nil", ok, err)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", `must be an amqp:// or amqps:// URL, not ""`},
		{"http://user:secret@host/", `not "http"`},
		{"user:secret@host", `not "user"`},
		{"amqp:///vh", "no host"},
		{"amqp://user:secret@:5672/", "no host"},
		{"amqp://user:sec ret@host/", "not a valid URL"},
		{"amqp://user:secret@host:port/", "not a valid URL"},
		{"amqp://user:secret@host/?heartbeat=often", "heartbeat"},
		{"amqp://user:secret@host/?channel_max=many", "channel_max"},
	} {
		err := ValidateURL(tc.in)
		switch {
		case err == nil:
			t.Errorf("ValidateURL(%q) = nil; want an error", tc.in)
		case !strings.Contains(err.Error(), tc.want):
			t.Errorf("ValidateURL(%q) = %v; want it to say %q", tc.in, err, tc.want)
		case strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "sec ret"):
			t.Errorf("ValidateURL(%q) = %v leaks the password", tc.in, err)
		}
	}
}

func TestScrubber(t *testing.T) {
	s := newScrubber("amqp://user:p%2Fw+d@host/")
	got := s.scrub("a p/w+d, an escaped p%2Fw+d, a query p%2Fw%2Bd")
	if want := "a ***, an escaped ***, a query ***"; got != want {
		t.Errorf("scrub = %q; want %q", got, want)
	}
	if got := newScrubber("amqp://user@host/").scrub("user"); got != "user" {
		t.Errorf("scrub without a password = %q; want it unchanged", got)
	}
}
