package kubestore

import (
	"testing"
	"time"
)

// TestConflictBackoffLasts checks that an update keeps retrying a conflict
// for as long as conflictBackoff's comment says: wait.Backoff quietly ends
// the retries at its Cap, which once cut 30 steps to 8 and 15 s to 1 s.
func TestConflictBackoffLasts(t *testing.T) {
	b := conflictBackoff
	b.Jitter = 0 // the least it waits
	tries, total, longest := 1, time.Duration(0), time.Duration(0)
	for b.Steps > 0 {
		d := b.Step()
		total, longest = total+d, max(longest, d)
		tries++
	}
	if tries < 30 || total < 10*time.Second || longest > 3*time.Second {
		t.Errorf("%d tries over %s, the longest wait %s; want at least 30 tries over at least 10 s, no wait over 3 s", tries, total, longest)
	}
}
