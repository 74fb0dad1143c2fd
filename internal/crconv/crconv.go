// Package crconv maps the REST API's objects (functions.Function,
// triggers.Trigger, triggers.Job) to the custom resources of api/v1alpha1
// and back. It is the one place where a field of the REST API meets its
// custom resource field, so that a store of custom resources, the
// controllers of the cluster mode and kubectl users all see the same
// object.
//
// Every mapping is lossless for what the REST API stores, with the
// precisions of Kubernetes: times of conditions and of metadata are whole
// seconds (metav1.Time), the status times of sless's own fields keep
// microseconds (metav1.MicroTime), an empty env or payload is none, and a
// function that no reconciler has looked at yet (no status phase) is
// Pending since its creation.
//
// Namespaces are the stores': the Kubernetes namespace of an object is not
// its API namespace (see names.Namespace), so a custom resource made here
// has none and the API namespace of one read is an argument. A Function's
// status.url is not part of the REST API's status; the store writes it.
package crconv

import (
	"encoding/json"
	"maps"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.kube5s.ru/sless/api/v1alpha1"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/triggers"
)

// FunctionToCR returns the custom resource of fn: its name, spec, code and
// status.
func FunctionToCR(fn *functions.Function) *v1alpha1.Function {
	return &v1alpha1.Function{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Function"},
		ObjectMeta: metav1.ObjectMeta{Name: fn.Name},
		Spec:       FunctionSpecToCR(fn.Spec, fn.CodeSHA256),
		Status:     FunctionStatusToCR(fn.Status),
	}
}

// FunctionSpecToCR returns the custom resource spec of spec and the code
// codeSHA256.
func FunctionSpecToCR(spec functions.Spec, codeSHA256 string) v1alpha1.FunctionSpec {
	return v1alpha1.FunctionSpec{
		Runtime:        spec.Runtime,
		Handler:        spec.Handler,
		Env:            cloneMap(spec.Env),
		TimeoutSeconds: int32(spec.TimeoutSeconds),
		MemoryMB:       int32(spec.MemoryMB),
		MinInstances:   int32(spec.MinInstances),
		MaxInstances:   int32(spec.MaxInstances),
		Concurrency:    int32(spec.Concurrency),
		Egress:         spec.Egress,
		CodeSHA256:     codeSHA256,
	}
}

// FunctionStatusToCR returns the custom resource status of st.
func FunctionStatusToCR(st functions.Status) v1alpha1.FunctionStatus {
	out := v1alpha1.FunctionStatus{
		Phase:              string(st.Phase),
		Message:            st.Message,
		CodeSHA256:         st.CodeSHA256,
		BuildLog:           st.BuildLog,
		ObservedGeneration: st.ObservedGeneration,
		UpdatedAt:          microTime(st.UpdatedAt),
		Artifact:           st.Artifact,
		ArtifactRuntime:    st.ArtifactRuntime,
		ArtifactHandler:    st.ArtifactHandler,
		BuildKey:           st.BuildKey,
	}
	for _, c := range st.Conditions {
		out.Conditions = append(out.Conditions, metav1.Condition{
			Type: c.Type, Status: metav1.ConditionStatus(c.Status), Reason: c.Reason, Message: c.Message,
			ObservedGeneration: c.ObservedGeneration, LastTransitionTime: metav1.NewTime(c.LastTransitionTime),
		})
	}
	return out
}

// FunctionFromCR returns the function of the custom resource cr, in API
// namespace ns.
func FunctionFromCR(cr *v1alpha1.Function, ns string) *functions.Function {
	s := &cr.Spec
	fn := &functions.Function{
		Name:      cr.Name,
		Namespace: ns,
		Spec: functions.Spec{
			Runtime:        s.Runtime,
			Handler:        s.Handler,
			Env:            cloneMap(s.Env),
			TimeoutSeconds: int(s.TimeoutSeconds),
			MemoryMB:       int(s.MemoryMB),
			MinInstances:   int(s.MinInstances),
			MaxInstances:   int(s.MaxInstances),
			Concurrency:    int(s.Concurrency),
			Egress:         s.Egress,
		},
		CodeSHA256: s.CodeSHA256,
		Generation: cr.Generation,
		CreatedAt:  cr.CreationTimestamp.UTC(),
		UpdatedAt:  SpecUpdatedAt(&cr.ObjectMeta),
		Status:     functionStatusFromCR(&cr.Status),
	}
	if fn.Status.Phase == "" {
		// No reconciler has written a status yet: the function waits for
		// one, as a new function of the embedded mode does.
		fn.Status.Phase = functions.PhasePending
		fn.Status.UpdatedAt = fn.CreatedAt
	}
	return fn
}

func functionStatusFromCR(st *v1alpha1.FunctionStatus) functions.Status {
	out := functions.Status{
		Phase:              functions.Phase(st.Phase),
		Message:            st.Message,
		CodeSHA256:         st.CodeSHA256,
		BuildLog:           st.BuildLog,
		ObservedGeneration: st.ObservedGeneration,
		UpdatedAt:          fromMicroTime(st.UpdatedAt),
		Artifact:           st.Artifact,
		ArtifactRuntime:    st.ArtifactRuntime,
		ArtifactHandler:    st.ArtifactHandler,
		BuildKey:           st.BuildKey,
	}
	for _, c := range st.Conditions {
		out.Conditions = append(out.Conditions, functions.Condition{
			Type: c.Type, Status: functions.ConditionStatus(c.Status), Reason: c.Reason, Message: c.Message,
			ObservedGeneration: c.ObservedGeneration, LastTransitionTime: fromTime(c.LastTransitionTime),
		})
	}
	return out
}

// TriggerToCR returns the custom resource of t: its name, spec and status.
func TriggerToCR(t *triggers.Trigger) *v1alpha1.Trigger {
	return &v1alpha1.Trigger{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Trigger"},
		ObjectMeta: metav1.ObjectMeta{Name: t.Name},
		Spec:       TriggerSpecToCR(t.Spec),
		Status:     TriggerStatusToCR(t.Status),
	}
}

// TriggerSpecToCR returns the custom resource spec of spec. The fields of
// each type go to the object of the type's name, which is left out when
// none of them is set.
func TriggerSpecToCR(spec triggers.Spec) v1alpha1.TriggerSpec {
	out := v1alpha1.TriggerSpec{Function: spec.Function, Type: spec.Type, Enabled: clonePtr(spec.Enabled)}
	if spec.HTTPSpec != (triggers.HTTPSpec{}) {
		out.HTTP = &v1alpha1.HTTPTriggerSpec{Auth: spec.Auth}
		if in := spec.Ingress; in != nil {
			out.HTTP.Ingress = &v1alpha1.IngressSpec{Host: in.Host, ClassName: in.ClassName, TLSSecret: in.TLSSecret}
		}
	}
	c := &spec.CronSpec
	if c.Schedule != "" || c.Timezone != "" || len(c.Payload) > 0 || c.ConcurrencyPolicy != "" || c.PrewarmSeconds != 0 {
		out.Cron = &v1alpha1.CronTriggerSpec{
			Schedule: c.Schedule, Timezone: c.Timezone, Payload: string(c.Payload),
			ConcurrencyPolicy: c.ConcurrencyPolicy, PrewarmSeconds: int32(c.PrewarmSeconds),
		}
	}
	r := &spec.RabbitMQSpec
	if r.URL != "" || r.Queue != "" || r.Exchange != "" || r.RoutingKey != "" || r.Prefetch != 0 || r.MaxRetries != nil ||
		r.DeadLetterExchange != "" || r.DeadLetterQueue != "" {
		out.RabbitMQ = &v1alpha1.RabbitMQTriggerSpec{
			URL: r.URL, Queue: r.Queue, Exchange: r.Exchange, RoutingKey: r.RoutingKey, Prefetch: int32(r.Prefetch),
			DeadLetterExchange: r.DeadLetterExchange, DeadLetterQueue: r.DeadLetterQueue,
		}
		if r.MaxRetries != nil {
			n := int32(*r.MaxRetries)
			out.RabbitMQ.MaxRetries = &n
		}
	}
	return out
}

// TriggerStatusToCR returns the custom resource status of st.
func TriggerStatusToCR(st triggers.Status) v1alpha1.TriggerStatus {
	return v1alpha1.TriggerStatus{
		Phase:              st.Phase,
		Message:            st.Message,
		LastFiredAt:        microTimePtr(st.LastFiredAt),
		LastError:          st.LastError,
		LastErrorAt:        microTimePtr(st.LastErrorAt),
		NextFireAt:         microTimePtr(st.NextFireAt),
		Fired:              st.Fired,
		Succeeded:          st.Succeeded,
		Failed:             st.Failed,
		Skipped:            st.Skipped,
		DeadLettered:       st.DeadLettered,
		ObservedGeneration: st.ObservedGeneration,
	}
}

// TriggerFromCR returns the trigger of the custom resource cr, in API
// namespace ns.
func TriggerFromCR(cr *v1alpha1.Trigger, ns string) *triggers.Trigger {
	s := &cr.Spec
	t := &triggers.Trigger{
		Name:       cr.Name,
		Namespace:  ns,
		Spec:       triggers.Spec{Function: s.Function, Type: s.Type, Enabled: clonePtr(s.Enabled)},
		Generation: cr.Generation,
		CreatedAt:  cr.CreationTimestamp.UTC(),
		UpdatedAt:  SpecUpdatedAt(&cr.ObjectMeta),
		Status: triggers.Status{
			Phase:              cr.Status.Phase,
			Message:            cr.Status.Message,
			LastFiredAt:        fromMicroTimePtr(cr.Status.LastFiredAt),
			LastError:          cr.Status.LastError,
			LastErrorAt:        fromMicroTimePtr(cr.Status.LastErrorAt),
			NextFireAt:         fromMicroTimePtr(cr.Status.NextFireAt),
			Fired:              cr.Status.Fired,
			Succeeded:          cr.Status.Succeeded,
			Failed:             cr.Status.Failed,
			Skipped:            cr.Status.Skipped,
			DeadLettered:       cr.Status.DeadLettered,
			ObservedGeneration: cr.Status.ObservedGeneration,
		},
	}
	if h := s.HTTP; h != nil {
		t.HTTPSpec = triggers.HTTPSpec{Auth: h.Auth}
		if in := h.Ingress; in != nil {
			t.Ingress = &triggers.IngressSpec{Host: in.Host, ClassName: in.ClassName, TLSSecret: in.TLSSecret}
		}
	}
	if c := s.Cron; c != nil {
		t.CronSpec = triggers.CronSpec{
			Schedule: c.Schedule, Timezone: c.Timezone, Payload: rawJSON(c.Payload),
			ConcurrencyPolicy: c.ConcurrencyPolicy, PrewarmSeconds: int(c.PrewarmSeconds),
		}
	}
	if r := s.RabbitMQ; r != nil {
		t.RabbitMQSpec = triggers.RabbitMQSpec{
			URL: r.URL, Queue: r.Queue, Exchange: r.Exchange, RoutingKey: r.RoutingKey, Prefetch: int(r.Prefetch),
			DeadLetterExchange: r.DeadLetterExchange, DeadLetterQueue: r.DeadLetterQueue,
		}
		if r.MaxRetries != nil {
			n := int(*r.MaxRetries)
			t.MaxRetries = &n
		}
	}
	return t
}

// JobToCR returns the custom resource of j: its name, spec and status.
func JobToCR(j *triggers.Job) *v1alpha1.FunctionJob {
	return &v1alpha1.FunctionJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "FunctionJob"},
		ObjectMeta: metav1.ObjectMeta{Name: j.Name},
		Spec:       JobSpecToCR(j.JobSpec),
		Status:     JobStatusToCR(j.Status),
	}
}

// JobSpecToCR returns the custom resource spec of spec.
func JobSpecToCR(spec triggers.JobSpec) v1alpha1.FunctionJobSpec {
	return v1alpha1.FunctionJobSpec{Function: spec.Function, Payload: string(spec.Payload), RunID: spec.RunID}
}

// JobStatusToCR returns the custom resource status of st.
func JobStatusToCR(st triggers.JobStatus) v1alpha1.FunctionJobStatus {
	return v1alpha1.FunctionJobStatus{
		Phase:              st.Phase,
		RunID:              st.RunID,
		InvocationID:       st.InvocationID,
		StartedAt:          microTimePtr(st.StartedAt),
		FinishedAt:         microTimePtr(st.FinishedAt),
		StatusCode:         int32(st.StatusCode),
		Result:             st.Result,
		Error:              st.Error,
		ObservedGeneration: st.ObservedGeneration,
	}
}

// JobFromCR returns the job of the custom resource cr, in API namespace
// ns.
func JobFromCR(cr *v1alpha1.FunctionJob, ns string) *triggers.Job {
	st := &cr.Status
	return &triggers.Job{
		Name:       cr.Name,
		Namespace:  ns,
		JobSpec:    triggers.JobSpec{Function: cr.Spec.Function, Payload: rawJSON(cr.Spec.Payload), RunID: cr.Spec.RunID},
		Generation: cr.Generation,
		CreatedAt:  cr.CreationTimestamp.UTC(),
		UpdatedAt:  SpecUpdatedAt(&cr.ObjectMeta),
		Status: triggers.JobStatus{
			Phase:              st.Phase,
			RunID:              st.RunID,
			InvocationID:       st.InvocationID,
			StartedAt:          fromMicroTimePtr(st.StartedAt),
			FinishedAt:         fromMicroTimePtr(st.FinishedAt),
			StatusCode:         int(st.StatusCode),
			Result:             st.Result,
			Error:              st.Error,
			ObservedGeneration: st.ObservedGeneration,
		},
	}
}

// SpecUpdatedAt is when the spec of the object with metadata m last
// changed: the latest time of the managed fields entries that own spec
// fields (the API server updates an entry's time whenever its manager
// changes one of its fields), else the creation time. Status writes do not
// count, as the REST API's updated_at does not count them.
func SpecUpdatedAt(m *metav1.ObjectMeta) time.Time {
	latest := m.CreationTimestamp.Time
	for _, e := range m.ManagedFields {
		if e.Subresource != "" || e.Time == nil || e.FieldsV1 == nil || !e.Time.After(latest) {
			continue
		}
		var fields map[string]json.RawMessage
		if json.Unmarshal(e.FieldsV1.Raw, &fields) != nil {
			continue
		}
		if _, ok := fields["f:spec"]; ok {
			latest = e.Time.Time
		}
	}
	return latest.UTC()
}

func microTime(t time.Time) *metav1.MicroTime {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewMicroTime(t)
	return &mt
}

func microTimePtr(t *time.Time) *metav1.MicroTime {
	if t == nil {
		return nil
	}
	mt := metav1.NewMicroTime(*t)
	return &mt
}

func fromMicroTime(t *metav1.MicroTime) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

func fromMicroTimePtr(t *metav1.MicroTime) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// fromTime returns t in UTC; the zero time stays zero.
func fromTime(t metav1.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

// rawJSON returns the JSON text s as a payload; empty is none.
func rawJSON(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

// cloneMap returns a copy of m; empty is nil.
func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
