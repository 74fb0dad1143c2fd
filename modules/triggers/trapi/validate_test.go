package trapi

import (
	"errors"
	"slices"
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
