package triggers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"sless.kube5s.ru/sless/internal/validation"
)

// MaxPayloadBytes caps cron and job payloads.
const MaxPayloadBytes = 256 << 10

// TypesGroup is the fx value-group tag that the trigger types other than
// http are added to, as a Type:
//
//	fx.Provide(fx.Annotate(NewMyType, fx.As(new(triggers.Type)), fx.ResultTags(triggers.TypesGroup)))
const TypesGroup = `group:"triggers.types"`

// Type is what the module of one trigger type adds to the contract: the
// defaults and checks of the type's fields that only it understands (a cron
// schedule, a broker URL). The http type is built in; cron and rabbitmq
// register theirs, so that this package and the REST API import no runner.
// Methods are cheap, free of side effects and safe for concurrent use.
type Type interface {
	// Name is the type's Spec.Type.
	Name() string
	// ApplyDefaults fills the zero fields of the type in spec that have
	// defaults.
	ApplyDefaults(spec *Spec)
	// Validate adds to errs an error for every bad field of the type in
	// spec, after ApplyDefaults. Fields of other types are checked by
	// Validate, not by the type.
	Validate(spec *Spec, errs *validation.Errors)
}

// Redactor is implemented by a Type whose fields hold a secret (a broker
// password), which API answers must not show.
type Redactor interface {
	// Redact replaces the secrets of spec with placeholders.
	Redact(spec *Spec)
	// Unredact puts old's secrets back into spec where spec holds the
	// placeholders that Redact put in: a client that read a trigger sends
	// them back meaning "unchanged".
	Unredact(spec, old *Spec)
}

// Capabilities are what the server's mode can do for triggers beyond what
// every mode does. The zero Capabilities are the embedded mode's.
type Capabilities struct {
	// Ingress: the mode makes the Ingress an http trigger asks for (the
	// kubernetes mode). Without it a trigger with an ingress is refused.
	Ingress bool
}

// Types is the set of trigger types a server knows. It is immutable.
type Types struct {
	byName map[string]Type
	// names are http, then the registered types by name.
	names []string
}

// NewTypes returns the set of http and types, for a server of caps; a
// duplicate or empty name is an error, so that start-up fails with a clear
// message.
func NewTypes(types []Type, caps Capabilities) (*Types, error) {
	ts := &Types{byName: map[string]Type{TypeHTTP: httpType{caps: caps}}}
	var names []string
	for _, t := range types {
		name := t.Name()
		if name == "" {
			return nil, fmt.Errorf("a trigger type (%T) has no name", t)
		}
		if _, dup := ts.byName[name]; dup {
			return nil, fmt.Errorf("trigger type %q is registered twice", name)
		}
		ts.byName[name] = t
		names = append(names, name)
	}
	slices.Sort(names)
	ts.names = append([]string{TypeHTTP}, names...)
	return ts, nil
}

// Names returns the names of the types: http, then the others by name.
func (ts *Types) Names() []string { return slices.Clone(ts.names) }

// httpType is the built-in http type: its triggers open /fn, and ask for
// an Ingress where caps allow it.
type httpType struct{ caps Capabilities }

func (httpType) Name() string { return TypeHTTP }

func (httpType) ApplyDefaults(spec *Spec) {
	if spec.Auth == "" {
		spec.Auth = AuthNone
	}
}

func (h httpType) Validate(spec *Spec, errs *validation.Errors) {
	if spec.Auth != AuthNone && spec.Auth != AuthToken {
		errs.Add("auth", "%.32q is not one of none, token", spec.Auth)
	}
	in := spec.Ingress
	if in == nil {
		return
	}
	if !h.caps.Ingress {
		errs.Add("ingress", "needs the kubernetes mode (sless server --mode kubernetes), which makes the Ingress; "+
			"this server runs in the embedded mode and has no ingress controller: call /fn on the server itself")
		return
	}
	if in.Host == "" {
		errs.Add("ingress.host", "is required: the DNS name the Ingress serves, such as hello.example.com")
	} else if msg := validation.CheckDNSName(in.Host); msg != "" {
		errs.Add("ingress.host", "%s", msg)
	}
	for _, f := range []struct{ field, value string }{{"ingress.class_name", in.ClassName}, {"ingress.tls_secret", in.TLSSecret}} {
		if f.value == "" {
			continue
		}
		if msg := validation.CheckDNSName(f.value); msg != "" {
			errs.Add(f.field, "%s", msg)
		}
	}
}

// ApplyDefaults fills the zero fields of t that have defaults: Enabled, and
// those of its type.
func ApplyDefaults(t *Trigger, types *Types) {
	if t.Enabled == nil {
		on := true
		t.Enabled = &on
	}
	if typ, ok := types.byName[t.Type]; ok {
		typ.ApplyDefaults(&t.Spec)
	}
	t.Payload = compactJSON(t.Payload)
}

// Validate checks a trigger after ApplyDefaults and returns a
// *validation.Errors naming every bad field.
func Validate(t *Trigger, types *Types) error {
	errs := &validation.Errors{Resource: "trigger"}
	errs.Name("name", t.Name)
	errs.Namespace("namespace", t.Namespace)
	errs.Name("function", t.Function)
	switch typ, ok := types.byName[t.Type]; {
	case ok:
		typ.Validate(&t.Spec, errs)
		onlyOwnFields(errs, &t.Spec)
	case t.Type == "":
		errs.Add("type", "is required: %s", alternatives(types.names))
	default:
		// %.32q: an enum's message need not quote a value of any length.
		errs.Add("type", "%.32q is not one of %s", t.Type, strings.Join(types.names, ", "))
	}
	return errs.Err()
}

// alternatives returns "a, b or c".
func alternatives(names []string) string {
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// field is a field of Spec that belongs to one type.
type field struct {
	name string
	set  func(s *Spec) bool
}

// fieldsOf lists the fields of each type, in the order their errors are
// reported.
var fieldsOf = []struct {
	typ    string
	fields []field
}{
	{TypeHTTP, []field{
		{"auth", func(s *Spec) bool { return s.Auth != "" }},
		{"ingress", func(s *Spec) bool { return s.Ingress != nil }},
	}},
	{TypeCron, []field{
		{"schedule", func(s *Spec) bool { return s.Schedule != "" }},
		{"timezone", func(s *Spec) bool { return s.Timezone != "" }},
		{"payload", func(s *Spec) bool { return len(s.Payload) > 0 }},
		{"concurrency_policy", func(s *Spec) bool { return s.ConcurrencyPolicy != "" }},
		{"prewarm_seconds", func(s *Spec) bool { return s.PrewarmSeconds != 0 }},
	}},
	{TypeRabbitMQ, []field{
		{"url", func(s *Spec) bool { return s.URL != "" }},
		{"queue", func(s *Spec) bool { return s.Queue != "" }},
		{"exchange", func(s *Spec) bool { return s.Exchange != "" }},
		{"routing_key", func(s *Spec) bool { return s.RoutingKey != "" }},
		{"prefetch", func(s *Spec) bool { return s.Prefetch != 0 }},
		{"max_retries", func(s *Spec) bool { return s.MaxRetries != nil }},
		{"dead_letter_exchange", func(s *Spec) bool { return s.DeadLetterExchange != "" }},
		{"dead_letter_queue", func(s *Spec) bool { return s.DeadLetterQueue != "" }},
	}},
}

// onlyOwnFields reports the fields of other types that s sets.
func onlyOwnFields(errs *validation.Errors, s *Spec) {
	for _, other := range fieldsOf {
		if other.typ == s.Type {
			continue
		}
		for _, f := range other.fields {
			if f.set(s) {
				errs.Add(f.name, "is a field of %s triggers, not of %s triggers", other.typ, s.Type)
			}
		}
	}
}

// Redacted returns t as API answers show it: without the secrets of its
// type.
func Redacted(t *Trigger, types *Types) *Trigger {
	out := *t
	if r, ok := types.byName[t.Type].(Redactor); ok {
		r.Redact(&out.Spec)
	}
	return &out
}

// Unredact puts old's secrets back into t where t holds the placeholders
// that Redacted shows (see Redactor).
func Unredact(t, old *Trigger, types *Types) {
	if r, ok := types.byName[t.Type].(Redactor); ok {
		r.Unredact(&t.Spec, &old.Spec)
	}
}

// CheckPayload adds an error to errs for a payload over MaxPayloadBytes or
// not JSON.
func CheckPayload(errs *validation.Errors, field string, payload json.RawMessage) {
	if len(payload) > MaxPayloadBytes {
		errs.Add(field, "is %d bytes; the limit is %d", len(payload), MaxPayloadBytes)
	}
	if len(payload) > 0 && !json.Valid(payload) {
		errs.Add(field, "must be JSON")
	}
}

// ApplyJobDefaults normalizes a job's payload.
func ApplyJobDefaults(j *Job) { j.Payload = compactJSON(j.Payload) }

// ValidateJob checks a job after ApplyJobDefaults and returns a
// *validation.Errors naming every bad field.
func ValidateJob(j *Job) error {
	errs := &validation.Errors{Resource: "job"}
	errs.Name("name", j.Name)
	errs.Namespace("namespace", j.Namespace)
	errs.Name("function", j.Function)
	CheckPayload(errs, "payload", j.Payload)
	if j.RunID < 0 {
		errs.Add("run_id", "must not be negative (0 means do not run)")
	}
	return errs.Err()
}

// compactJSON normalizes a payload so that equal payloads compare equal:
// compacted, and nil for none or null. A payload that is not JSON is
// returned as it is, for Validate to refuse.
func compactJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	if buf.String() == "null" {
		return nil
	}
	return buf.Bytes()
}
