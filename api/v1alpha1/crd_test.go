package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"sless.kube5s.ru/sless/api/v1alpha1"
	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/internal/testenv/kubeenv"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/cron"
	"sless.kube5s.ru/sless/modules/triggers/rabbitmq"
)

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m)) }

var ctx = context.Background()

// namespace returns a new namespace of t's own on the package's API server.
func namespace(t *testing.T) (*kubeenv.Env, string) {
	t.Helper()
	env := kubeenv.Start(t)
	ns := env.NamespacePrefix(t) + "crd"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return env, ns
}

// object returns an object of kind with spec, as kubectl would send it.
func object(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(kind))
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// with returns base with the fields of more set.
func with(base map[string]any, more map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range more {
		out[k] = v
	}
	return out
}

// TestLimits creates objects at and over every limit of the README's
// Limits table that a schema can state, from the constants the REST API
// checks with, so that the CRDs and the REST API refuse the same values.
func TestLimits(t *testing.T) {
	env, ns := namespace(t)
	fn := map[string]any{"runtime": "python3.11"}
	rmq := map[string]any{"function": "f", "type": "rabbitmq"}
	cronTrigger := map[string]any{"function": "f", "type": "cron"}
	job := map[string]any{"function": "f"}
	long := func(n int) string { return strings.Repeat("a", n) }
	env257 := map[string]any{}
	for i := range functions.MaxEnvVars + 1 {
		env257[fmt.Sprintf("V%d", i)] = "x"
	}
	tests := []struct {
		name, kind string
		objName    string
		spec       map[string]any
		// wantErr is a part of the refusal (the field), or "" for none.
		wantErr string
	}{
		{"a minimal function", "Function", "", fn, ""},
		{"timeout at its maximum", "Function", "", with(fn, map[string]any{"timeoutSeconds": functions.MaxTimeoutSeconds}), ""},
		{"timeout over", "Function", "", with(fn, map[string]any{"timeoutSeconds": functions.MaxTimeoutSeconds + 1}), "spec.timeoutSeconds"},
		{"timeout zero", "Function", "", with(fn, map[string]any{"timeoutSeconds": 0}), "spec.timeoutSeconds"},
		{"memory at its minimum", "Function", "", with(fn, map[string]any{"memoryMB": functions.MinMemoryMB}), ""},
		{"memory under", "Function", "", with(fn, map[string]any{"memoryMB": functions.MinMemoryMB - 1}), "spec.memoryMB"},
		{"memory at its maximum", "Function", "", with(fn, map[string]any{"memoryMB": functions.MaxMemoryMB}), ""},
		{"memory over", "Function", "", with(fn, map[string]any{"memoryMB": functions.MaxMemoryMB + 1}), "spec.memoryMB"},
		{"max instances over", "Function", "", with(fn, map[string]any{"maxInstances": functions.MaxInstancesLimit + 1}), "spec.maxInstances"},
		{"min instances at max", "Function", "", with(fn, map[string]any{"minInstances": 5, "maxInstances": 5}), ""},
		{"min instances over max", "Function", "", with(fn, map[string]any{"minInstances": 6, "maxInstances": 5}), "minInstances must not exceed maxInstances"},
		{"concurrency over", "Function", "", with(fn, map[string]any{"concurrency": functions.MaxConcurrency + 1}), "spec.concurrency"},
		{"egress public", "Function", "", with(fn, map[string]any{"egress": "public"}), ""},
		{"egress unknown", "Function", "", with(fn, map[string]any{"egress": "none"}), "spec.egress"},
		{"runtime too long", "Function", "", map[string]any{"runtime": long(functions.MaxRuntimeBytes + 1)}, "spec.runtime"},
		{"runtime missing", "Function", "", map[string]any{}, "spec.runtime"},
		{"handler at its maximum", "Function", "", with(fn, map[string]any{"handler": long(functions.MaxHandlerBytes)}), ""},
		{"handler over", "Function", "", with(fn, map[string]any{"handler": long(functions.MaxHandlerBytes + 1)}), "spec.handler"},
		{"env", "Function", "", with(fn, map[string]any{"env": map[string]any{"A_1": "x", "_b": ""}}), ""},
		{"env name with a dash", "Function", "", with(fn, map[string]any{"env": map[string]any{"A-B": "x"}}), "variable names must match"},
		{"env name reserved", "Function", "", with(fn, map[string]any{"env": map[string]any{"SLESS_X": "x"}}), "variable names must match"},
		{"env name too long", "Function", "", with(fn, map[string]any{"env": map[string]any{long(functions.MaxEnvNameBytes + 1): "x"}}), "variable names must match"},
		{"env too many", "Function", "", with(fn, map[string]any{"env": env257}), "spec.env"},
		{"env value too long", "Function", "", with(fn, map[string]any{"env": map[string]any{"A": long(functions.MaxEnvBytes + 1)}}), "at most 64 KiB"},
		{"code not hex", "Function", "", with(fn, map[string]any{"codeSHA256": "XYZ"}), "spec.codeSHA256"},
		{"name at its maximum", "Function", long(63), fn, ""},
		{"name too long", "Function", long(64), fn, "name must be at most 63 characters"},
		{"name with a dot", "Function", "a.b", fn, "name must be at most 63 characters"},

		{"a minimal http trigger", "Trigger", "", map[string]any{"function": "f", "type": "http"}, ""},
		{"trigger type unknown", "Trigger", "", map[string]any{"function": "f", "type": "kafka"}, "spec.type"},
		{"trigger function not a name", "Trigger", "", map[string]any{"function": "F", "type": "http"}, "spec.function"},
		{"auth unknown", "Trigger", "", map[string]any{"function": "f", "type": "http", "http": map[string]any{"auth": "basic"}}, "spec.http.auth"},
		{"schedule at its maximum", "Trigger", "", with(cronTrigger, map[string]any{"cron": map[string]any{"schedule": long(cron.MaxScheduleBytes)}}), ""},
		{"schedule over", "Trigger", "", with(cronTrigger, map[string]any{"cron": map[string]any{"schedule": long(cron.MaxScheduleBytes + 1)}}), "spec.cron.schedule"},
		{"timezone over", "Trigger", "", with(cronTrigger, map[string]any{"cron": map[string]any{"timezone": long(cron.MaxTimezoneBytes + 1)}}), "spec.cron.timezone"},
		{"payload at its maximum", "Trigger", "", with(cronTrigger, map[string]any{"cron": map[string]any{"payload": `"` + long(triggers.MaxPayloadBytes-2) + `"`}}), ""},
		{"payload over", "Trigger", "", with(cronTrigger, map[string]any{"cron": map[string]any{"payload": long(triggers.MaxPayloadBytes + 1)}}), "spec.cron.payload"},
		{"policy unknown", "Trigger", "", with(cronTrigger, map[string]any{"cron": map[string]any{"concurrencyPolicy": "Queue"}}), "spec.cron.concurrencyPolicy"},
		{"prewarm over", "Trigger", "", with(cronTrigger, map[string]any{"cron": map[string]any{"prewarmSeconds": cron.MaxPrewarmSeconds + 1}}), "spec.cron.prewarmSeconds"},
		{"url at its maximum", "Trigger", "", with(rmq, map[string]any{"rabbitmq": map[string]any{"url": long(rabbitmq.MaxURLBytes)}}), ""},
		{"url over", "Trigger", "", with(rmq, map[string]any{"rabbitmq": map[string]any{"url": long(rabbitmq.MaxURLBytes + 1)}}), "spec.rabbitmq.url"},
		{"queue over", "Trigger", "", with(rmq, map[string]any{"rabbitmq": map[string]any{"queue": long(rabbitmq.MaxAMQPNameBytes + 1)}}), "spec.rabbitmq.queue"},
		{"routing key over", "Trigger", "", with(rmq, map[string]any{"rabbitmq": map[string]any{"routingKey": long(rabbitmq.MaxAMQPNameBytes + 1)}}), "spec.rabbitmq.routingKey"},
		{"dead letter queue over", "Trigger", "", with(rmq, map[string]any{"rabbitmq": map[string]any{"deadLetterQueue": long(rabbitmq.MaxAMQPNameBytes + 1)}}), "spec.rabbitmq.deadLetterQueue"},
		{"prefetch over", "Trigger", "", with(rmq, map[string]any{"rabbitmq": map[string]any{"prefetch": rabbitmq.MaxPrefetch + 1}}), "spec.rabbitmq.prefetch"},
		{"max retries at its maximum", "Trigger", "", with(rmq, map[string]any{"rabbitmq": map[string]any{"maxRetries": rabbitmq.MaxRetriesLimit}}), ""},
		{"max retries over", "Trigger", "", with(rmq, map[string]any{"rabbitmq": map[string]any{"maxRetries": rabbitmq.MaxRetriesLimit + 1}}), "spec.rabbitmq.maxRetries"},
		{"trigger name too long", "Trigger", long(64), map[string]any{"function": "f", "type": "http"}, "name must be at most 63 characters"},

		{"a job", "FunctionJob", "", with(job, map[string]any{"payload": `{"a":1}`, "runID": 3}), ""},
		{"job run ID negative", "FunctionJob", "", with(job, map[string]any{"runID": -1}), "spec.runID"},
		{"job payload over", "FunctionJob", "", with(job, map[string]any{"payload": long(triggers.MaxPayloadBytes + 1)}), "spec.payload"},
		{"job function missing", "FunctionJob", "", map[string]any{}, "spec.function"},
		{"job name too long", "FunctionJob", long(64), job, "name must be at most 63 characters"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.objName
			if name == "" {
				name = fmt.Sprintf("obj-%d", i)
			}
			err := env.Client.Create(ctx, object(tc.kind, ns, name, tc.spec))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("create: %v; want it accepted", err)
			case tc.wantErr != "" && err == nil:
				t.Errorf("create accepted; want it refused naming %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Errorf("create: %v; want a refusal naming %q", err, tc.wantErr)
			}
		})
	}
}

// TestDefaults creates objects with only their required fields, as a
// kubectl user may, and checks that they get the defaults the REST API
// gives.
func TestDefaults(t *testing.T) {
	env, ns := namespace(t)
	var fn v1alpha1.Function
	if err := env.Client.Create(ctx, object("Function", ns, "fn", map[string]any{"runtime": "nodejs20"})); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fn"}, &fn); err != nil {
		t.Fatal(err)
	}
	wantFn := v1alpha1.FunctionSpec{Runtime: "nodejs20", TimeoutSeconds: functions.DefaultTimeoutSeconds,
		MemoryMB: functions.DefaultMemoryMB, MaxInstances: functions.DefaultMaxInstances,
		Concurrency: functions.DefaultConcurrency, Egress: "all"}
	if diff := cmp.Diff(wantFn, fn.Spec); diff != "" {
		t.Errorf("function defaults (-want +got):\n%s", diff)
	}

	trigger := map[string]any{"function": "f", "type": "rabbitmq", "http": map[string]any{},
		"cron": map[string]any{}, "rabbitmq": map[string]any{}}
	if err := env.Client.Create(ctx, object("Trigger", ns, "tr", trigger)); err != nil {
		t.Fatal(err)
	}
	var tr v1alpha1.Trigger
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tr"}, &tr); err != nil {
		t.Fatal(err)
	}
	on, retries := true, int32(rabbitmq.DefaultMaxRetries)
	wantTr := v1alpha1.TriggerSpec{Function: "f", Type: "rabbitmq", Enabled: &on,
		HTTP:     &v1alpha1.HTTPTriggerSpec{Auth: triggers.AuthNone},
		Cron:     &v1alpha1.CronTriggerSpec{ConcurrencyPolicy: triggers.PolicyAllow},
		RabbitMQ: &v1alpha1.RabbitMQTriggerSpec{Prefetch: rabbitmq.DefaultPrefetch, MaxRetries: &retries}}
	if diff := cmp.Diff(wantTr, tr.Spec); diff != "" {
		t.Errorf("trigger defaults (-want +got):\n%s", diff)
	}
}

// TestStatusIsASubresource checks that a write of the whole object keeps
// the status and a status write keeps the spec, which the stores rely on.
func TestStatusIsASubresource(t *testing.T) {
	env, ns := namespace(t)
	fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fn"},
		Spec: v1alpha1.FunctionSpec{Runtime: "python3.11"}, Status: v1alpha1.FunctionStatus{Phase: "Ready"}}
	if err := env.Client.Create(ctx, fn); err != nil {
		t.Fatal(err)
	}
	if fn.Status.Phase != "" || fn.Generation != 1 {
		t.Errorf("created: status phase %q, generation %d; want no status (a create ignores it), generation 1", fn.Status.Phase, fn.Generation)
	}
	fn.Status.Phase = "Building"
	if err := env.Client.Status().Update(ctx, fn); err != nil {
		t.Fatal(err)
	}
	if fn.Generation != 1 {
		t.Errorf("generation after a status write: %d; want 1", fn.Generation)
	}
	fn.Spec.MemoryMB = 512
	fn.Status.Phase = "Failed"
	if err := env.Client.Update(ctx, fn); err != nil {
		t.Fatal(err)
	}
	if fn.Status.Phase != "Building" || fn.Generation != 2 {
		t.Errorf("after a spec write: status phase %q, generation %d; want Building, 2", fn.Status.Phase, fn.Generation)
	}
}

// TestDocExamples creates every object of docs/custom-resources.md's YAML
// examples, so that the documentation shows objects the CRDs accept.
func TestDocExamples(t *testing.T) {
	env, ns := namespace(t)
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "docs", "custom-resources.md"))
	if err != nil {
		t.Fatal(err)
	}
	var objects []string
	for _, block := range strings.Split(string(doc), "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		objects = append(objects, strings.Split(block, "---\n")...)
	}
	if len(objects) < 5 {
		t.Fatalf("found %d example objects; want one of each kind and trigger type", len(objects))
	}
	for _, y := range objects {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
			t.Fatalf("example %q: %v", y, err)
		}
		u.SetNamespace(ns)
		if err := env.Client.Create(ctx, &u); err != nil {
			t.Errorf("creating the example %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}
