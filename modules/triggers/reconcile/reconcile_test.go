package reconcile_test

import (
	"context"
	"testing"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/reconcile"
	"sless.kube5s.ru/sless/modules/triggers/trstoretest"
)

// TestSuspension: a function is suspended when it has http triggers and
// none is enabled; other types do not count.
func TestSuspension(t *testing.T) {
	off := false
	tests := []struct {
		name     string
		triggers []triggers.Spec
		want     bool
	}{
		{"no triggers", nil, false},
		{"an enabled http trigger", []triggers.Spec{{Type: triggers.TypeHTTP}}, false},
		{"a disabled http trigger", []triggers.Spec{{Type: triggers.TypeHTTP, Enabled: &off}}, true},
		{"one of two http triggers enabled", []triggers.Spec{{Type: triggers.TypeHTTP, Enabled: &off}, {Type: triggers.TypeHTTP}}, false},
		{"a cron trigger only", []triggers.Spec{{Type: triggers.TypeCron}}, false},
		{"a disabled http and an enabled cron trigger", []triggers.Spec{{Type: triggers.TypeHTTP, Enabled: &off}, {Type: triggers.TypeCron}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := trstoretest.NewTriggers()
			for i, spec := range tc.triggers {
				spec.Function = "f"
				if _, err := store.Create(ctx, &triggers.Trigger{Namespace: "ns", Name: string(rune('a' + i)), Spec: spec}); err != nil {
					t.Fatal(err)
				}
			}
			// A disabled http trigger of another function changes nothing.
			if _, err := store.Create(ctx, &triggers.Trigger{Namespace: "ns", Name: "other",
				Spec: triggers.Spec{Function: "g", Type: triggers.TypeHTTP, Enabled: &off}}); err != nil {
				t.Fatal(err)
			}
			got, err := reconcile.NewSuspension(store).Suspended(ctx, functions.Key{Namespace: "ns", Name: "f"})
			if err != nil || got != tc.want {
				t.Errorf("Suspended = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
