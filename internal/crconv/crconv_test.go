package crconv

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.kube5s.ru/sless/api/v1alpha1"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/triggers"
)

// at is a time with microseconds, which sless's own status times keep.
var at = time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)

// fullFunction returns a function with every field set.
func fullFunction() *functions.Function {
	return &functions.Function{
		Name: "hello", Namespace: "team-a",
		Spec: functions.Spec{Runtime: "python3.11", Handler: "main.run", Env: map[string]string{"A": "1", "B": "two words"},
			TimeoutSeconds: 60, MemoryMB: 512, MinInstances: 1, MaxInstances: 7, Concurrency: 4, Egress: "public"},
		CodeSHA256: "c0de", Generation: 3, CreatedAt: at.Truncate(time.Second), UpdatedAt: at.Truncate(time.Second).Add(time.Minute),
		Status: functions.Status{Phase: functions.PhaseFailed, Message: "build failed: x", CodeSHA256: "0ld",
			BuildLog: "log", ObservedGeneration: 2, UpdatedAt: at,
			Conditions: []functions.Condition{
				{Type: functions.ConditionBuildSucceeded, Status: functions.ConditionFalse, Reason: functions.ReasonBuildFailed,
					Message: "x", ObservedGeneration: 2, LastTransitionTime: at.Truncate(time.Second)},
				{Type: functions.ConditionReady, Status: functions.ConditionTrue, Reason: functions.ReasonServing,
					Message: "old code", ObservedGeneration: 1, LastTransitionTime: at.Truncate(time.Second).Add(-time.Hour)},
			},
			Artifact: "registry.example/fn@sha256:abc", ArtifactRuntime: "python3.11", ArtifactHandler: "handler.handle", BuildKey: "k1"},
	}
}

// fullTrigger returns a trigger with every field set, those of every type.
func fullTrigger() *triggers.Trigger {
	on, retries := false, 0
	return &triggers.Trigger{
		Name: "orders", Namespace: "team-a",
		Spec: triggers.Spec{Function: "hello", Type: triggers.TypeRabbitMQ, Enabled: &on,
			HTTPSpec: triggers.HTTPSpec{Auth: triggers.AuthToken,
				Ingress: &triggers.IngressSpec{Host: "hello.example.com", ClassName: "nginx", TLSSecret: "hello-tls"}},
			CronSpec: triggers.CronSpec{Schedule: "@every 1m", Timezone: "Europe/Berlin",
				Payload: json.RawMessage(`{"z":1,"a":12345678901234567890}`), ConcurrencyPolicy: triggers.PolicyForbid, PrewarmSeconds: 5},
			RabbitMQSpec: triggers.RabbitMQSpec{URL: "amqp://u:p@mq/vh", Queue: "q", Exchange: "x", RoutingKey: "r.*",
				Prefetch: 7, MaxRetries: &retries, DeadLetterExchange: "dlx", DeadLetterQueue: "dlq"},
		},
		Generation: 2, CreatedAt: at.Truncate(time.Second), UpdatedAt: at.Truncate(time.Second),
		Status: triggers.Status{Phase: triggers.PhaseError, Message: "m", LastFiredAt: ptr(at), LastError: "boom",
			LastErrorAt: ptr(at.Add(time.Second)), NextFireAt: ptr(at.Add(time.Minute)),
			Fired: 5, Succeeded: 1, Failed: 2, Skipped: 3, DeadLettered: 4, ObservedGeneration: 2},
	}
}

// fullJob returns a job with every field set.
func fullJob() *triggers.Job {
	return &triggers.Job{
		Name: "rebuild", Namespace: "team-a",
		JobSpec:    triggers.JobSpec{Function: "hello", Payload: json.RawMessage(`{"all": true}`), RunID: 4},
		Generation: 4, CreatedAt: at.Truncate(time.Second), UpdatedAt: at.Truncate(time.Second),
		Status: triggers.JobStatus{Phase: triggers.JobFailed, RunID: 3, InvocationID: "inv-1", StartedAt: ptr(at),
			FinishedAt: ptr(at.Add(time.Second)), StatusCode: 502, Result: `{"ok":false}`, Error: "interrupted", ObservedGeneration: 3},
	}
}

func ptr[T any](v T) *T { return &v }

// checkAllSet fails t for every field of v (a struct, followed through
// pointers to structs, nested structs and slices) that has its zero value
// or is a nil pointer, so that a field added to a REST type fails the
// round trips until the sample, and then the mapping, have it.
func checkAllSet(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			t.Errorf("the sample leaves %s unset", path)
		} else if v.Elem().Kind() == reflect.Struct {
			checkAllSet(t, path, v.Elem())
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			if v.Interface().(time.Time).IsZero() {
				t.Errorf("the sample leaves %s unset", path)
			}
			return
		}
		for i := range v.NumField() {
			checkAllSet(t, path+"."+v.Type().Field(i).Name, v.Field(i))
		}
	case reflect.Slice:
		if v.Len() == 0 {
			t.Errorf("the sample leaves %s unset", path)
		}
		for i := range v.Len() {
			checkAllSet(t, path, v.Index(i))
		}
	default:
		if v.IsZero() {
			t.Errorf("the sample leaves %s unset", path)
		}
	}
}

// throughJSON returns a copy of cr as the API server would store and
// return it: encoded to JSON and decoded.
func throughJSON[T any](t *testing.T, cr *T) *T {
	t.Helper()
	data, err := json.Marshal(cr)
	if err != nil {
		t.Fatal(err)
	}
	out := new(T)
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// withMeta sets the metadata the API server keeps for the REST object's
// generation and times.
func withMeta(m *metav1.ObjectMeta, gen int64, created, updated time.Time) {
	m.Generation = gen
	m.CreationTimestamp = metav1.NewTime(created)
	m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "sless", Operation: metav1.ManagedFieldsOperationUpdate,
		Time: ptr(metav1.NewTime(updated)), FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}}
}

func TestFunctionRoundTrip(t *testing.T) {
	want := fullFunction()
	checkAllSet(t, "", reflect.ValueOf(want).Elem())
	cr := throughJSON(t, FunctionToCR(want))
	withMeta(&cr.ObjectMeta, want.Generation, want.CreatedAt, want.UpdatedAt)
	if diff := cmp.Diff(want, FunctionFromCR(cr, want.Namespace)); diff != "" {
		t.Errorf("function -> custom resource -> function (-want +got):\n%s", diff)
	}
}

func TestTriggerRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		tr   *triggers.Trigger
	}{
		{"every field", fullTrigger()},
		{"http", &triggers.Trigger{Name: "web", Namespace: "default",
			Spec: triggers.Spec{Function: "hello", Type: triggers.TypeHTTP, Enabled: ptr(true), HTTPSpec: triggers.HTTPSpec{Auth: triggers.AuthNone}}}},
		{"cron without a payload", &triggers.Trigger{Name: "nightly", Namespace: "default",
			Spec: triggers.Spec{Function: "hello", Type: triggers.TypeCron, CronSpec: triggers.CronSpec{Schedule: "0 3 * * *"}}}},
		{"rabbitmq without max retries", &triggers.Trigger{Name: "q", Namespace: "default",
			Spec: triggers.Spec{Function: "hello", Type: triggers.TypeRabbitMQ, RabbitMQSpec: triggers.RabbitMQSpec{URL: "amqp://mq", Queue: "q"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cr := throughJSON(t, TriggerToCR(tc.tr))
			withMeta(&cr.ObjectMeta, tc.tr.Generation, tc.tr.CreatedAt, tc.tr.UpdatedAt)
			if diff := cmp.Diff(tc.tr, TriggerFromCR(cr, tc.tr.Namespace)); diff != "" {
				t.Errorf("trigger -> custom resource -> trigger (-want +got):\n%s", diff)
			}
		})
	}
	checkAllSet(t, "", reflect.ValueOf(fullTrigger()).Elem())
}

func TestJobRoundTrip(t *testing.T) {
	want := fullJob()
	checkAllSet(t, "", reflect.ValueOf(want).Elem())
	cr := throughJSON(t, JobToCR(want))
	withMeta(&cr.ObjectMeta, want.Generation, want.CreatedAt, want.UpdatedAt)
	if diff := cmp.Diff(want, JobFromCR(cr, want.Namespace)); diff != "" {
		t.Errorf("job -> custom resource -> job (-want +got):\n%s", diff)
	}
}

// TestTypeFieldsGoToTheirObject checks that a trigger of one type has only
// that type's object, as kubectl users write them.
func TestTypeFieldsGoToTheirObject(t *testing.T) {
	got := TriggerSpecToCR(triggers.Spec{Function: "f", Type: triggers.TypeCron,
		CronSpec: triggers.CronSpec{Schedule: "@hourly", Payload: json.RawMessage(`[1]`)}})
	want := v1alpha1.TriggerSpec{Function: "f", Type: "cron", Cron: &v1alpha1.CronTriggerSpec{Schedule: "@hourly", Payload: "[1]"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cron trigger spec (-want +got):\n%s", diff)
	}
}

// TestUnreconciledFunctionIsPending checks the function of a custom
// resource without a status: Pending since its creation, as a new function
// of the embedded mode.
func TestUnreconciledFunctionIsPending(t *testing.T) {
	created := at.Truncate(time.Second)
	cr := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "f", Namespace: "ns", Generation: 1,
		CreationTimestamp: metav1.NewTime(created)}, Spec: v1alpha1.FunctionSpec{Runtime: "nodejs20", Env: map[string]string{}}}
	fn := FunctionFromCR(cr, "ns")
	want := functions.Status{Phase: functions.PhasePending, UpdatedAt: created}
	if diff := cmp.Diff(want, fn.Status); diff != "" || fn.Env != nil || fn.UpdatedAt != created {
		t.Errorf("status (-want +got):\n%s\nenv %v (want nil), updated %v (want %v)", diff, fn.Env, fn.UpdatedAt, created)
	}
}

func TestSpecUpdatedAt(t *testing.T) {
	created := at.Truncate(time.Second)
	entry := func(sub string, after time.Duration, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: "m", Subresource: sub, Time: ptr(metav1.NewTime(created.Add(after))),
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	for _, tc := range []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		want    time.Time
	}{
		{"no entries", nil, created},
		{"a spec write", []metav1.ManagedFieldsEntry{entry("", time.Minute, `{"f:spec":{"f:runtime":{}}}`)}, created.Add(time.Minute)},
		{"the latest spec write", []metav1.ManagedFieldsEntry{
			entry("", time.Minute, `{"f:spec":{}}`), entry("", time.Hour, `{"f:spec":{}}`), entry("", 2*time.Minute, `{"f:spec":{}}`)},
			created.Add(time.Hour)},
		{"status writes do not count", []metav1.ManagedFieldsEntry{
			entry("", time.Minute, `{"f:spec":{}}`), entry("status", time.Hour, `{"f:status":{}}`)}, created.Add(time.Minute)},
		{"metadata writes do not count", []metav1.ManagedFieldsEntry{
			entry("", time.Minute, `{"f:spec":{}}`), entry("", time.Hour, `{"f:metadata":{"f:finalizers":{}}}`)}, created.Add(time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created), ManagedFields: tc.entries}
			if got := SpecUpdatedAt(m); !got.Equal(tc.want) || got.Location() != time.UTC {
				t.Errorf("SpecUpdatedAt = %v; want %v in UTC", got, tc.want)
			}
		})
	}
}

// TestCRFieldNames pins the custom resources' field names: they are the
// API that kubectl users and manifests write.
func TestCRFieldNames(t *testing.T) {
	keys := func(v any) []string {
		t.Helper()
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		var out []string
		for k := range m {
			out = append(out, k)
		}
		return out
	}
	sorted := cmpopts.SortSlices(func(a, b string) bool { return a < b })
	fn := FunctionToCR(fullFunction())
	tr := TriggerToCR(fullTrigger())
	job := JobToCR(fullJob())
	for _, tc := range []struct {
		name string
		v    any
		want []string
	}{
		{"function spec", fn.Spec, []string{"runtime", "handler", "env", "timeoutSeconds", "memoryMB", "minInstances",
			"maxInstances", "concurrency", "egress", "codeSHA256"}},
		{"function status", fn.Status, []string{"phase", "message", "codeSHA256", "buildLog", "observedGeneration",
			"updatedAt", "conditions", "artifact", "artifactRuntime", "artifactHandler", "buildKey"}},
		{"trigger spec", tr.Spec, []string{"function", "type", "enabled", "http", "cron", "rabbitmq"}},
		{"cron", tr.Spec.Cron, []string{"schedule", "timezone", "payload", "concurrencyPolicy", "prewarmSeconds"}},
		{"rabbitmq", tr.Spec.RabbitMQ, []string{"url", "queue", "exchange", "routingKey", "prefetch", "maxRetries",
			"deadLetterExchange", "deadLetterQueue"}},
		{"trigger status", tr.Status, []string{"phase", "message", "lastFiredAt", "lastError", "lastErrorAt", "nextFireAt",
			"fired", "succeeded", "failed", "skipped", "deadLettered", "observedGeneration"}},
		{"job spec", job.Spec, []string{"function", "payload", "runID"}},
		{"job status", job.Status, []string{"phase", "runID", "invocationID", "startedAt", "finishedAt", "statusCode",
			"result", "error", "observedGeneration"}},
	} {
		if diff := cmp.Diff(tc.want, keys(tc.v), sorted); diff != "" {
			t.Errorf("%s fields (-want +got):\n%s", tc.name, diff)
		}
	}
}
