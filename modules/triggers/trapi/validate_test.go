package trapi

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/triggers"
)

func TestFieldsOfOtherTypesAreRefused(t *testing.T) {
	tr := &triggers.Trigger{Name: "web", Namespace: "default", Spec: triggers.Spec{Function: "hello", Type: triggers.TypeHTTP}}
	tr.Schedule, tr.Prefetch, tr.Queue = "@hourly", 5, "jobs"
	applyTriggerDefaults(tr)
	var ve *validation.Errors
	if err := validateTrigger(tr); !errors.As(err, &ve) {
		t.Fatalf("validateTrigger = %v; want field errors", err)
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
	cronTrigger := func(mutate func(*triggers.Trigger)) *triggers.Trigger {
		tr := &triggers.Trigger{Name: "nightly", Namespace: "default", Spec: triggers.Spec{Function: "hello", Type: triggers.TypeCron}}
		tr.Schedule = "@hourly"
		mutate(tr)
		applyTriggerDefaults(tr)
		return tr
	}
	rabbitTrigger := func(mutate func(*triggers.Trigger)) *triggers.Trigger {
		tr := &triggers.Trigger{Name: "orders", Namespace: "default", Spec: triggers.Spec{Function: "hello", Type: triggers.TypeRabbitMQ}}
		tr.URL, tr.Queue = "amqp://guest:guest@localhost:5672/", "orders"
		mutate(tr)
		applyTriggerDefaults(tr)
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
			err := validateTrigger(tt.tr)
			var got []string
			var ve *validation.Errors
			if errors.As(err, &ve) {
				for _, f := range ve.Fields {
					got = append(got, f.Field+": "+f.Msg)
				}
			} else if err != nil {
				t.Fatalf("validateTrigger = %v; want field errors", err)
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
	if err := validateJob(j); !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != "namespace" {
		t.Errorf("validateJob = %v; want a namespace error", err)
	}
}

func TestJobPayloadIsBounded(t *testing.T) {
	j := &triggers.Job{Name: "once", Namespace: "default", JobSpec: triggers.JobSpec{Function: "hello",
		Payload: json.RawMessage(`"` + strings.Repeat("p", MaxPayloadBytes) + `"`)}}
	var ve *validation.Errors
	if err := validateJob(j); !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != "payload" ||
		!strings.Contains(ve.Fields[0].Msg, "the limit is 262144") {
		t.Errorf("validateJob = %v; want a payload error naming the limit", err)
	}
}

func TestHTTPAuth(t *testing.T) {
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
		applyTriggerDefaults(tr)
		err := validateTrigger(tr)
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
