package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"

	"sless.kube5s.ru/sless/modules/functions"
)

// The code in the state is what builds: a failed build of new code leaves
// the serving code there, so that the next plan uploads the new code again.
func TestBuiltCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   functions.Function
		want string
	}{
		{"ready", functions.Function{CodeSHA256: "new", Generation: 3, Status: functions.Status{Phase: functions.PhaseReady, CodeSHA256: "new", ObservedGeneration: 3}}, "new"},
		{"failed build of new code", functions.Function{CodeSHA256: "new", Generation: 3, Status: functions.Status{Phase: functions.PhaseFailed, CodeSHA256: "old", ObservedGeneration: 3}}, "old"},
		{"first build failed", functions.Function{CodeSHA256: "new", Generation: 2, Status: functions.Status{Phase: functions.PhaseFailed, ObservedGeneration: 2}}, ""},
		{"failed, then new code not yet seen", functions.Function{CodeSHA256: "newer", Generation: 4, Status: functions.Status{Phase: functions.PhaseFailed, CodeSHA256: "old", ObservedGeneration: 3}}, "newer"},
		{"building", functions.Function{CodeSHA256: "new", Generation: 3, Status: functions.Status{Phase: functions.PhaseBuilding, CodeSHA256: "old", ObservedGeneration: 3}}, "new"},
	} {
		if got := builtCode(&tc.fn); got != tc.want {
			t.Errorf("%s: builtCode = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestSameJSON(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{`{"a": 1}`, `{"a":1}`, true},
		{"", "null", true},
		{"", " ", true},
		{`{"a":1}`, `{"a":2}`, false},
		{`[1,2]`, `[2,1]`, false},
		{"", `{}`, false},
	} {
		if got := sameJSON(tc.a, tc.b); got != tc.same {
			t.Errorf("sameJSON(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
	}
}

// env = {} and no env both stay as written when the server has no env.
func TestStringMapKeepsTheFormOfEmpty(t *testing.T) {
	empty, _ := types.MapValue(types.StringType, nil)
	if got := stringMap(nil, empty); got.IsNull() || len(got.Elements()) != 0 {
		t.Errorf("an empty env written as {} became %v", got)
	}
	if got := stringMap(nil, types.MapNull(types.StringType)); !got.IsNull() {
		t.Errorf("an unset env became %v", got)
	}
	if got := stringMap(map[string]string{"A": "1"}, types.MapNull(types.StringType)); len(got.Elements()) != 1 {
		t.Errorf("env {A: 1} became %v", got)
	}
}
