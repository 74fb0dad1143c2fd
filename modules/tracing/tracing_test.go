package tracing

import "testing"

func TestParse(t *testing.T) {
	valid := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		in     string
		ok     bool
		sample bool
	}{
		{valid, true, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true, false},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future", true, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", false, false},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false, false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false, false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false, false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false, false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", false, false},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false, false},
		{"00-4bf92f3577b34da6a3ce929d0e0e473x-00f067aa0ba902b7-01", false, false},
		{"", false, false},
	}
	for _, tc := range tests {
		c, ok := Parse(tc.in)
		if ok != tc.ok || (ok && c.Sampled() != tc.sample) {
			t.Errorf("Parse(%q) = %v sampled %v, want %v sampled %v", tc.in, ok, c.Sampled(), tc.ok, tc.sample)
		}
	}
	c, _ := Parse(valid)
	if got := c.String(); got != valid {
		t.Errorf("String() = %q, want %q", got, valid)
	}
	if got, want := c.TraceID.String(), "4bf92f3577b34da6a3ce929d0e0e4736"; got != want {
		t.Errorf("TraceID = %s, want %s", got, want)
	}
}
