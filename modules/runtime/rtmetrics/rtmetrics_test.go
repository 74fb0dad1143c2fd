package rtmetrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"sless.kube5s.ru/sless/modules/meta"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/rtmetrics"
)

type stats []runtime.InstanceStats

func (s stats) InstanceStats() []runtime.InstanceStats { return s }

// TestCollector: each function's report becomes its series, and a
// function the executor no longer reports has none.
func TestCollector(t *testing.T) {
	report := stats{{Key: meta.Key{Namespace: "team-a", Name: "hello"}, Starting: 1, Idle: 2, Busy: 3, Queued: 4, MemoryKills: 5, Restarts: 6}}
	want := `
# HELP sless_instances Instances of a function by state: starting (a cold start or a prewarm), idle, busy (serving at least one invocation).
# TYPE sless_instances gauge
sless_instances{function="hello",namespace="team-a",state="busy"} 3
sless_instances{function="hello",namespace="team-a",state="idle"} 2
sless_instances{function="hello",namespace="team-a",state="starting"} 1
# HELP sless_invocations_queued Invocations of a function waiting for a free instance.
# TYPE sless_invocations_queued gauge
sless_invocations_queued{function="hello",namespace="team-a"} 4
# HELP sless_instance_memory_kills_total Instances of a function killed for using more memory than its memory_mb, since it was deployed.
# TYPE sless_instance_memory_kills_total counter
sless_instance_memory_kills_total{function="hello",namespace="team-a"} 5
# HELP sless_instance_restarts_total Instances of a function that ended because they crashed, were killed or timed out (and are replaced on demand), since it was deployed.
# TYPE sless_instance_restarts_total counter
sless_instance_restarts_total{function="hello",namespace="team-a"} 6
`
	if err := testutil.CollectAndCompare(rtmetrics.New(report), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(rtmetrics.New(stats{})); n != 0 {
		t.Errorf("no functions reported: %d series, want 0", n)
	}
}
