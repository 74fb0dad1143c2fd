package functions_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"sless.kube5s.ru/sless/modules/functions"
)

// fullStatus has every field of a status set.
func fullStatus() functions.Status {
	at := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	return functions.Status{
		Phase: functions.PhaseFailed, Message: "build failed: x", CodeSHA256: "c1", BuildLog: "log",
		ObservedGeneration: 3, UpdatedAt: at,
		Conditions: []functions.Condition{
			{Type: functions.ConditionBuildSucceeded, Status: functions.ConditionFalse, Reason: functions.ReasonBuildFailed,
				Message: "build failed: x", ObservedGeneration: 3, LastTransitionTime: at},
			{Type: functions.ConditionReady, Status: functions.ConditionFalse, Reason: functions.ReasonBuildFailed,
				Message: "build failed: x", ObservedGeneration: 3, LastTransitionTime: at.Add(time.Second)},
		},
		Artifact: "/data/artifacts/ab", ArtifactRuntime: "python3.11", ArtifactHandler: "main.run", BuildKey: "k1",
	}
}

// A status written through any store that keeps its JSON (a custom
// resource's status) comes back whole: the build key and the artifact
// included, or a reconcile would build the same code again and again.
func TestStatusSurvivesAJSONRoundTrip(t *testing.T) {
	st := fullStatus()
	v := reflect.ValueOf(st)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("fullStatus leaves %s unset; set it so that the round trip covers it", v.Type().Field(i).Name)
		}
	}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back functions.Status
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(st, back); diff != "" {
		t.Errorf("after a JSON round trip (-want +got):\n%s", diff)
	}
}

// The REST API shows the phase and conditions, not the bookkeeping.
func TestPublicLeavesTheBookkeepingOut(t *testing.T) {
	fn := &functions.Function{Name: "f", Namespace: "default", Status: fullStatus()}
	data, err := json.Marshal(fn.Public())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"artifact"`, `"artifact_runtime"`, `"artifact_handler"`, `"build_key"`, "/data/artifacts"} {
		if strings.Contains(string(data), key) {
			t.Errorf("the public function has %s: %s", key, data)
		}
	}
	if !strings.Contains(string(data), `"conditions":[{"type":"BuildSucceeded","status":"False","reason":"BuildFailed"`) {
		t.Errorf("the public function lacks its conditions: %s", data)
	}
	if fn.Status.Artifact == "" {
		t.Error("Public changed the function it was called on")
	}
}

// A condition's transition time moves only when its status changes.
func TestSetConditionKeepsTheTransitionTime(t *testing.T) {
	t0, t1, t2 := time.Unix(100, 0), time.Unix(200, 0), time.Unix(300, 0)
	var st functions.Status
	st.SetCondition(functions.Condition{Type: functions.ConditionReady, Status: functions.ConditionUnknown, Reason: functions.ReasonBuilding}, t0)
	st.SetCondition(functions.Condition{Type: functions.ConditionReady, Status: functions.ConditionUnknown, Reason: functions.ReasonDeploying}, t1)
	if c := st.Condition(functions.ConditionReady); c.Reason != functions.ReasonDeploying || !c.LastTransitionTime.Equal(t0) {
		t.Errorf("same status: %+v; want the new reason and the first time", c)
	}
	st.SetCondition(functions.Condition{Type: functions.ConditionReady, Status: functions.ConditionTrue, Reason: functions.ReasonServing}, t2)
	if c := st.Condition(functions.ConditionReady); !c.LastTransitionTime.Equal(t2) || len(st.Conditions) != 1 {
		t.Errorf("new status: %+v (%d conditions); want the new time, one condition", c, len(st.Conditions))
	}
	if st.Condition(functions.ConditionBuildSucceeded) != nil {
		t.Error("a condition never set was found")
	}
}
