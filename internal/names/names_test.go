package names

import (
	"strings"
	"testing"

	k8svalidation "k8s.io/apimachinery/pkg/util/validation"

	"sless.kube5s.ru/sless/internal/validation"
)

// derived lists every derived name of an API name with the Kubernetes rule
// it must satisfy and its length limit.
func derived(name string) []struct {
	kind, got string
	max       int
} {
	return []struct {
		kind, got string
		max       int
	}{
		{"Deployment", Deployment(name), MaxLabel},
		{"Service", Service(name), MaxLabel},
		{"EnvSecret", EnvSecret(name), MaxLabel},
		{"NetworkPolicy", NetworkPolicy(name), MaxLabel},
		{"BuildJob", BuildJob(name, strings.Repeat("ab", 32)), MaxLabel},
		{"CronJob", CronJob(name), MaxCronJob},
		{"Job", Job(name, 9223372036854775807), MaxLabel},
		{"LabelValue", LabelValue(name), MaxLabel},
	}
}

// checkDerived fails t when a name derived from the valid API name is not a
// valid Kubernetes name within its limit.
func checkDerived(t *testing.T, name string) {
	t.Helper()
	for _, d := range derived(name) {
		if len(d.got) > d.max {
			t.Errorf("%s(%q) = %q is %d characters; the limit is %d", d.kind, name, d.got, len(d.got), d.max)
		}
		check := k8svalidation.IsDNS1035Label
		if d.kind == "LabelValue" {
			check = k8svalidation.IsValidLabelValue
		}
		if errs := check(d.got); len(errs) > 0 {
			t.Errorf("%s(%q) = %q is not valid: %v", d.kind, name, d.got, errs)
		}
	}
	if errs := k8svalidation.IsDNS1123Label(Namespace(name)); len(errs) > 0 {
		t.Errorf("Namespace(%q) is not valid: %v", name, errs)
	}
	// An Ingress name is a DNS-1123 subdomain.
	if got := TriggerIngress(name, name); len(k8svalidation.IsDNS1123Subdomain(got)) > 0 {
		t.Errorf("TriggerIngress(%q, %q) = %q is not valid: %v", name, name, got, k8svalidation.IsDNS1123Subdomain(got))
	}
}

func TestDerivedNamesAreValid(t *testing.T) {
	for _, name := range []string{
		"a", "0", "9lives", "hello", "a-b",
		strings.Repeat("a", 52), strings.Repeat("7", 63),
		strings.Repeat("a", 50) + "-" + strings.Repeat("b", 12), // a dash where a shortened name is cut
		"a" + strings.Repeat("-", 61) + "z",
	} {
		if msg := validation.CheckName(name); msg != "" {
			t.Fatalf("test input %q is not a valid API name: %s", name, msg)
		}
		checkDerived(t, name)
	}
}

func FuzzDerivedNamesAreValid(f *testing.F) {
	f.Add("hello")
	f.Add(strings.Repeat("x", 63))
	f.Fuzz(func(t *testing.T, name string) {
		if validation.CheckName(name) != "" {
			return
		}
		checkDerived(t, name)
	})
}

func TestNamesThatFitAreKept(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Deployment("hello"), "fn-hello"},
		{Service("9lives"), "fn-9lives"},
		{NetworkPolicy("hello"), "fn-hello"},
		{CronJob("nightly"), "cron-nightly"},
		{Job("import", 3), "job-import-3"},
		{LabelValue(strings.Repeat("a", 63)), strings.Repeat("a", 63)},
		{TriggerIngress("team-a", "web"), "trigger-team-a.web"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestShortenedNamesStayDistinctAndStable(t *testing.T) {
	a := strings.Repeat("a", 60) + "-one"
	b := strings.Repeat("a", 60) + "-two"
	// The namespace and the trigger are told apart, where a dash would not.
	if TriggerIngress("a-b", "c") == TriggerIngress("a", "b-c") {
		t.Errorf("TriggerIngress of (a-b, c) and (a, b-c) are both %q", TriggerIngress("a", "b-c"))
	}
	if CronJob(a) == CronJob(b) {
		t.Errorf("CronJob(%q) and CronJob(%q) are both %q", a, b, CronJob(a))
	}
	if Deployment(a) != Deployment(a) {
		t.Errorf("Deployment(%q) is not deterministic", a)
	}
	// The hash is part of the contract: a name must not change between
	// versions, or the cluster mode would orphan the objects it made.
	if got, want := CronJob(a), "cron-"+strings.Repeat("a", 36)+"-cbb91f8cec"; got != want {
		t.Errorf("CronJob(%q) = %q, want %q", a, got, want)
	}
	if got := Job("j", 1); got == Job("j", 11) {
		t.Errorf("runs 1 and 11 share the name %q", got)
	}
}
