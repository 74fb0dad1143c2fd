package triggers_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/cron"
	"sless.kube5s.ru/sless/modules/triggers/rabbitmq"
)

// types returns the types of the server: http, cron, rabbitmq.
func types(t *testing.T) *triggers.Types {
	t.Helper()
	ts, err := triggers.NewTypes([]triggers.Type{rabbitmq.Type{}, cron.Type{}}, triggers.Capabilities{})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestFieldsOfOtherTypesAreRefused(t *testing.T) {
	ts := types(t)
	tr := &triggers.Trigger{Name: "web", Namespace: "default", Spec: triggers.Spec{Function: "hello", Type: triggers.TypeHTTP}}
	tr.Schedule, tr.Prefetch, tr.Queue = "@hourly", 5, "jobs"
	triggers.ApplyDefaults(tr, ts)
	var ve *validation.Errors
	if err := triggers.Validate(tr, ts); !errors.As(err, &ve) {
		t.Fatalf("Validate = %v; want field errors", err)
	}
	var got []string
	for _, f := range ve.Fields {
		got = append(got, f.Field+": "+f.Msg)
	}
	want := []string{
		"schedule: is a field of cron triggers, not of http triggers",
		"queue: is a field of rabbitmq triggers, not of http triggers",
		"prefetch: is a field of rabbitmq triggers, not of http triggers",
	}
	if !slices.Equal(got, want) {
		t.Errorf("errors %q; want %q", got, want)
	}
}

func TestStringFieldsAreBounded(t *testing.T) {
	ts := types(t)
	cronTrigger := func(mutate func(*triggers.Trigger)) *triggers.Trigger {
		tr := &triggers.Trigger{Name: "nightly", Namespace: "default", Spec: triggers.Spec{Function: "hello", Type: triggers.TypeCron}}
		tr.Schedule = "@hourly"
		mutate(tr)
		triggers.ApplyDefaults(tr, ts)
		return tr
	}
	rabbitTrigger := func(mutate func(*triggers.Trigger)) *triggers.Trigger {
		tr := &triggers.Trigger{Name: "orders", Namespace: "default", Spec: triggers.Spec{Function: "hello", Type: triggers.TypeRabbitMQ}}
		tr.URL, tr.Queue = "amqp://guest:guest@localhost:5672/", "orders"
		mutate(tr)
		triggers.ApplyDefaults(tr, ts)
		return tr
	}
	long := func(n int) string { return strings.Repeat("a", n) }
	tests := []struct {
		name string
		tr   *triggers.Trigger
		want []string // "field: message"; nil means valid
	}{
		{"longest schedule", cronTrigger(func(tr *triggers.Trigger) { tr.Schedule = "0 0 * * *" + strings.Repeat(" ", 247) }), nil},
		{"schedule", cronTrigger(func(tr *triggers.Trigger) { tr.Schedule = "0 " + long(100<<10) }),
			[]string{"schedule: must be at most 256 bytes (got 102402)"}},
		{"timezone", cronTrigger(func(tr *triggers.Trigger) { tr.Timezone = long(65) }),
			[]string{"timezone: must be at most 64 bytes (got 65)"}},
		{"concurrency policy is quoted short", cronTrigger(func(tr *triggers.Trigger) { tr.ConcurrencyPolicy = long(10000) }),
			[]string{`concurrency_policy: "` + long(32) + `" is not one of Allow, Forbid, Replace`}},
		{"namespace", cronTrigger(func(tr *triggers.Trigger) { tr.Namespace = long(64) }),
			[]string{"namespace: must be at most 63 characters (got 64)"}},
		{"type is quoted short", &triggers.Trigger{Name: "x", Namespace: "default", Spec: triggers.Spec{Function: "hello", Type: long(5000)}},
			[]string{`type: "` + long(32) + `" is not one of http, cron, rabbitmq`}},
		{"url", rabbitTrigger(func(tr *triggers.Trigger) { tr.URL = "amqp://localhost/" + long(2048) }),
			[]string{"url: must be at most 2048 bytes (got 2065)"}},
		{"longest queue", rabbitTrigger(func(tr *triggers.Trigger) { tr.Queue = long(255) }), nil},
		{"queue", rabbitTrigger(func(tr *triggers.Trigger) { tr.Queue = long(256) }),
			[]string{"queue: must be at most 255 bytes (got 256)"}},
		{"exchange and routing key", rabbitTrigger(func(tr *triggers.Trigger) { tr.Exchange, tr.RoutingKey = long(300), long(301) }),
			[]string{"exchange: must be at most 255 bytes (got 300)", "routing_key: must be at most 255 bytes (got 301)"}},
		{"dead letter exchange", rabbitTrigger(func(tr *triggers.Trigger) { tr.DeadLetterExchange = long(256) }),
			[]string{"dead_letter_exchange: must be at most 255 bytes (got 256)"}},
		{"dead letter queue", rabbitTrigger(func(tr *triggers.Trigger) { tr.DeadLetterQueue = long(256) }),
			[]string{"dead_letter_queue: must be at most 255 bytes (got 256)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := triggers.Validate(tt.tr, ts)
			var got []string
			var ve *validation.Errors
			if errors.As(err, &ve) {
				for _, f := range ve.Fields {
					got = append(got, f.Field+": "+f.Msg)
				}
			} else if err != nil {
				t.Fatalf("Validate = %v; want field errors", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("errors %q; want %q", got, tt.want)
			}
		})
	}
}

func TestJobNamespaceIsChecked(t *testing.T) {
	j := &triggers.Job{Name: "once", Namespace: "Not_A_Name", JobSpec: triggers.JobSpec{Function: "hello"}}
	var ve *validation.Errors
	if err := triggers.ValidateJob(j); !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != "namespace" {
		t.Errorf("ValidateJob = %v; want a namespace error", err)
	}
}

func TestJobPayloadIsBounded(t *testing.T) {
	j := &triggers.Job{Name: "once", Namespace: "default", JobSpec: triggers.JobSpec{Function: "hello",
		Payload: json.RawMessage(`"` + strings.Repeat("p", triggers.MaxPayloadBytes) + `"`)}}
	var ve *validation.Errors
	if err := triggers.ValidateJob(j); !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != "payload" ||
		!strings.Contains(ve.Fields[0].Msg, "the limit is 262144") {
		t.Errorf("ValidateJob = %v; want a payload error naming the limit", err)
	}
}

func TestHTTPAuth(t *testing.T) {
	ts := types(t)
	tests := []struct {
		typ, auth, want string
	}{
		{triggers.TypeHTTP, "", ""},
		{triggers.TypeHTTP, "none", ""},
		{triggers.TypeHTTP, "token", ""},
		{triggers.TypeHTTP, "basic", `auth: "basic" is not one of none, token`},
		{triggers.TypeCron, "token", "auth: is a field of http triggers, not of cron triggers"},
	}
	for _, tt := range tests {
		tr := &triggers.Trigger{Name: "web", Namespace: "default", Spec: triggers.Spec{Function: "hello", Type: tt.typ}}
		tr.Auth = tt.auth
		if tt.typ == triggers.TypeCron {
			tr.Schedule = "@hourly"
		}
		triggers.ApplyDefaults(tr, ts)
		err := triggers.Validate(tr, ts)
		var ve *validation.Errors
		got := ""
		if errors.As(err, &ve) {
			got = ve.Fields[0].Field + ": " + ve.Fields[0].Msg
		}
		if got != tt.want {
			t.Errorf("%s trigger with auth %q: got %q; want %q", tt.typ, tt.auth, got, tt.want)
		}
		if tt.typ == triggers.TypeHTTP && tt.want == "" && tr.Auth == "" {
			t.Errorf("auth %q: no default applied", tt.auth)
		}
	}
}

// TestIngress: an http trigger's ingress is refused without the
// capability (the embedded mode), in words that name the mode it needs;
// with it, its host is required and every name is a bounded DNS name.
func TestIngress(t *testing.T) {
	cluster, err := triggers.NewTypes([]triggers.Type{rabbitmq.Type{}, cron.Type{}}, triggers.Capabilities{Ingress: true})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	tests := []struct {
		name     string
		types    *triggers.Types
		typ      string
		ingress  *triggers.IngressSpec
		want     []string // "field: message"; nil means valid
		contains string   // a part of the only message, instead of want
	}{
		{name: "none", types: types(t), typ: triggers.TypeHTTP},
		{name: "the embedded mode", types: types(t), typ: triggers.TypeHTTP, ingress: &triggers.IngressSpec{Host: "hello.example.com"},
			contains: "ingress: needs the kubernetes mode (sless server --mode kubernetes)"},
		{name: "host only", types: cluster, typ: triggers.TypeHTTP, ingress: &triggers.IngressSpec{Host: "hello.example.com"}},
		{name: "every field", types: cluster, typ: triggers.TypeHTTP,
			ingress: &triggers.IngressSpec{Host: "hello.example.com", ClassName: "nginx", TLSSecret: "hello-tls"}},
		{name: "a single-label host", types: cluster, typ: triggers.TypeHTTP, ingress: &triggers.IngressSpec{Host: "localhost"}},
		{name: "the longest host", types: cluster, typ: triggers.TypeHTTP, ingress: &triggers.IngressSpec{Host: long}},
		{name: "no host", types: cluster, typ: triggers.TypeHTTP, ingress: &triggers.IngressSpec{ClassName: "nginx"},
			want: []string{"ingress.host: is required: the DNS name the Ingress serves, such as hello.example.com"}},
		{name: "a host too long", types: cluster, typ: triggers.TypeHTTP, ingress: &triggers.IngressSpec{Host: long + "d"},
			want: []string{"ingress.host: must be at most 253 characters (got 254)"}},
		{name: "bad names", types: cluster, typ: triggers.TypeHTTP,
			ingress: &triggers.IngressSpec{Host: "Hello.example.com", ClassName: "nginx_public", TLSSecret: "tls..x"},
			want: []string{
				`ingress.host: "Hello.example.com" is not a DNS name: dot-separated parts of at most 63 lower-case letters, digits and '-', each starting and ending with a letter or digit, such as hello.example.com`,
				`ingress.class_name: "nginx_public" is not a DNS name: dot-separated parts of at most 63 lower-case letters, digits and '-', each starting and ending with a letter or digit, such as hello.example.com`,
				`ingress.tls_secret: "tls..x" is not a DNS name: dot-separated parts of at most 63 lower-case letters, digits and '-', each starting and ending with a letter or digit, such as hello.example.com`,
			}},
		{name: "a wildcard host", types: cluster, typ: triggers.TypeHTTP, ingress: &triggers.IngressSpec{Host: "*.example.com"},
			contains: `ingress.host: "*.example.com" is not a DNS name`},
		{name: "a label too long", types: cluster, typ: triggers.TypeHTTP, ingress: &triggers.IngressSpec{Host: strings.Repeat("a", 64) + ".example.com"},
			contains: "is not a DNS name"},
		{name: "a cron trigger", types: cluster, typ: triggers.TypeCron, ingress: &triggers.IngressSpec{Host: "hello.example.com"},
			want: []string{"ingress: is a field of http triggers, not of cron triggers"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := &triggers.Trigger{Name: "web", Namespace: "default", Spec: triggers.Spec{Function: "hello", Type: tc.typ}}
			tr.Ingress = tc.ingress
			if tc.typ == triggers.TypeCron {
				tr.Schedule = "@hourly"
			}
			triggers.ApplyDefaults(tr, tc.types)
			var got []string
			var ve *validation.Errors
			if err := triggers.Validate(tr, tc.types); errors.As(err, &ve) {
				for _, f := range ve.Fields {
					got = append(got, f.Field+": "+f.Msg)
				}
			} else if err != nil {
				t.Fatalf("Validate = %v; want field errors or none", err)
			}
			if tc.contains != "" {
				if len(got) != 1 || !strings.Contains(got[0], tc.contains) {
					t.Errorf("errors %q; want one containing %q", got, tc.contains)
				}
				return
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("errors %q; want %q", got, tc.want)
			}
		})
	}
}

// TestTypes checks that the messages name the registered types, http first,
// and that a type is registered once.
func TestTypes(t *testing.T) {
	ts := types(t)
	if got, want := ts.Names(), []string{"http", "cron", "rabbitmq"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %q; want %q", got, want)
	}
	for _, tc := range []struct{ typ, want string }{
		{"", "type: is required: http, cron or rabbitmq"},
		{"kafka", `type: "kafka" is not one of http, cron, rabbitmq`},
	} {
		tr := &triggers.Trigger{Name: "x", Namespace: "default", Spec: triggers.Spec{Function: "hello", Type: tc.typ}}
		triggers.ApplyDefaults(tr, ts)
		var ve *validation.Errors
		if err := triggers.Validate(tr, ts); !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field+": "+ve.Fields[0].Msg != tc.want {
			t.Errorf("type %q: Validate = %v; want %q", tc.typ, err, tc.want)
		}
	}
	// A server with http triggers only names only http.
	only, err := triggers.NewTypes(nil, triggers.Capabilities{})
	if err != nil {
		t.Fatal(err)
	}
	tr := &triggers.Trigger{Name: "x", Namespace: "default", Spec: triggers.Spec{Function: "hello", Type: triggers.TypeCron}}
	tr.Schedule = "@hourly"
	var ve *validation.Errors
	if err := triggers.Validate(tr, only); !errors.As(err, &ve) || ve.Fields[0].Msg != `"cron" is not one of http` {
		t.Errorf("a cron trigger where only http is registered: Validate = %v; want it refused", err)
	}
	for _, dup := range [][]triggers.Type{{cron.Type{}, cron.Type{}}, {httpNamed{}}} {
		if _, err := triggers.NewTypes(dup, triggers.Capabilities{}); err == nil || !strings.Contains(err.Error(), "registered twice") {
			t.Errorf("NewTypes(%T) = %v; want a duplicate refused", dup, err)
		}
	}
}

// httpNamed is a type that claims the built-in name.
type httpNamed struct{ cron.Type }

func (httpNamed) Name() string { return triggers.TypeHTTP }

func TestRedaction(t *testing.T) {
	ts := types(t)
	stored := &triggers.Trigger{Name: "orders", Namespace: "default", Spec: triggers.Spec{Function: "hello", Type: triggers.TypeRabbitMQ}}
	stored.URL, stored.Queue = "amqp://app:s3cret@broker:5672/vh", "orders"
	shown := triggers.Redacted(stored, ts)
	if shown.URL != "amqp://app:***@broker:5672/vh" || stored.URL != "amqp://app:s3cret@broker:5672/vh" {
		t.Errorf("Redacted: shown %q, stored %q; want the password hidden in the copy only", shown.URL, stored.URL)
	}
	// What a client read and sends back keeps the stored password; a new
	// URL is taken as it is.
	back := *shown
	triggers.Unredact(&back, stored, ts)
	if back.URL != stored.URL {
		t.Errorf("Unredact of the shown URL = %q; want the stored %q", back.URL, stored.URL)
	}
	changed := *shown
	changed.URL = "amqp://app:new@broker:5672/vh"
	triggers.Unredact(&changed, stored, ts)
	if changed.URL != "amqp://app:new@broker:5672/vh" {
		t.Errorf("Unredact of a new URL = %q; want it unchanged", changed.URL)
	}
	// Types without secrets are shown as they are.
	web := &triggers.Trigger{Name: "web", Namespace: "default", Spec: triggers.Spec{Function: "hello", Type: triggers.TypeHTTP}}
	if diff := cmp.Diff(web, triggers.Redacted(web, ts)); diff != "" {
		t.Errorf("Redacted changed an http trigger (-want +got):\n%s", diff)
	}
}
