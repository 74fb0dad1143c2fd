package control

import (
	"slices"
	"testing"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/reconcile"
)

func TestGate(t *testing.T) {
	fn := functions.Key{Namespace: "a", Name: "f"}
	pub := reconcile.Exposure{Function: fn}
	priv := reconcile.Exposure{Function: fn, TokenRequired: true}
	web, api := triggers.Key{Namespace: "a", Name: "web"}, triggers.Key{Namespace: "a", Name: "api"}
	g := NewGate()
	steps := []struct {
		name        string
		key         triggers.Key
		o           reconcile.Exposure
		want        invoke.Access
		wantChanged []functions.Key
	}{
		{"public trigger exposes", web, pub, invoke.Access{Exposed: true}, []functions.Key{fn}},
		{"a private one makes it private", api, priv, invoke.Access{Exposed: true, TokenRequired: true}, nil},
		{"the public one goes private too", web, priv, invoke.Access{Exposed: true, TokenRequired: true}, nil},
		{"one private trigger removed", api, reconcile.Exposure{}, invoke.Access{Exposed: true, TokenRequired: true}, nil},
		{"back to public", web, pub, invoke.Access{Exposed: true}, nil},
		{"the same again changes nothing", web, pub, invoke.Access{Exposed: true}, nil},
		{"last trigger removed", web, reconcile.Exposure{}, invoke.Access{}, []functions.Key{fn}},
	}
	for _, s := range steps {
		changed := g.set(s.key, s.o)
		if got := g.Access(fn.Namespace, fn.Name); got != s.want || !slices.Equal(changed, s.wantChanged) {
			t.Fatalf("%s: access %+v, changed %v; want %+v, %v", s.name, got, changed, s.want, s.wantChanged)
		}
	}
	if len(g.opened) != 0 || len(g.triggers) != 0 || len(g.private) != 0 {
		t.Errorf("gate kept state after every trigger was removed: %+v", g)
	}
}

// TestGateApplier: the applier of every replica of the cluster mode opens
// and closes /fn as the desired state says, and nothing else.
func TestGateApplier(t *testing.T) {
	g := NewGate()
	a := NewGateApplier(g)
	tr := &triggers.Trigger{Name: "web", Namespace: "a", Spec: triggers.Spec{Type: triggers.TypeHTTP, Function: "f"}}
	if err := a.Apply(t.Context(), tr, reconcile.Desired{Phase: triggers.PhaseActive, Exposure: reconcile.ExposureOf(tr)}); err != nil {
		t.Fatal(err)
	}
	if got := g.Access("a", "f"); !got.Exposed {
		t.Errorf("after an active http trigger: %+v, want exposed", got)
	}
	if err := a.Apply(t.Context(), tr, reconcile.Desired{Phase: triggers.PhaseDisabled}); err != nil {
		t.Fatal(err)
	}
	if got := g.Access("a", "f"); got.Exposed {
		t.Errorf("after disabling: %+v, want not exposed", got)
	}
	a.Apply(t.Context(), tr, reconcile.Desired{Phase: triggers.PhaseActive, Exposure: reconcile.ExposureOf(tr)})
	a.Remove(tr.Key())
	if got := g.Access("a", "f"); got.Exposed {
		t.Errorf("after removal: %+v, want not exposed", got)
	}
}
