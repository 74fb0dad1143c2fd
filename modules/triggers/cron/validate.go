package cron

import (
	"errors"

	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/triggers"
)

// Limits of cron trigger fields.
const (
	MaxPrewarmSeconds = 3600
	// MaxScheduleBytes caps a schedule, far beyond any real one.
	MaxScheduleBytes = 256
	// MaxTimezoneBytes caps a time zone name (the longest IANA name has 30).
	MaxTimezoneBytes = 64
)

// Type is the cron trigger type, for triggers.NewTypes.
type Type struct{}

// Name implements triggers.Type.
func (Type) Name() string { return triggers.TypeCron }

// ApplyDefaults implements triggers.Type.
func (Type) ApplyDefaults(spec *triggers.Spec) {
	if spec.ConcurrencyPolicy == "" {
		spec.ConcurrencyPolicy = triggers.PolicyAllow
	}
}

// Validate implements triggers.Type.
func (Type) Validate(spec *triggers.Spec, errs *validation.Errors) {
	c := &spec.CronSpec
	// The parser's messages quote the schedule and the time zone.
	scheduleOK := errs.MaxLen("schedule", c.Schedule, MaxScheduleBytes)
	timezoneOK := errs.MaxLen("timezone", c.Timezone, MaxTimezoneBytes)
	switch {
	case c.Schedule == "":
		errs.Add("schedule", "is required for cron triggers, e.g. \"*/5 * * * *\", \"@hourly\" or \"@every 30s\"")
	case scheduleOK && timezoneOK:
		if _, err := ParseSchedule(c.Schedule, c.Timezone); err != nil {
			// The parser names the field (schedule or timezone).
			var ve *validation.Errors
			if !errors.As(err, &ve) {
				errs.Add("schedule", "%v", err)
			} else {
				errs.Fields = append(errs.Fields, ve.Fields...)
			}
		}
	}
	triggers.CheckPayload(errs, "payload", c.Payload)
	switch c.ConcurrencyPolicy {
	case triggers.PolicyAllow, triggers.PolicyForbid, triggers.PolicyReplace:
	default:
		errs.Add("concurrency_policy", "%.32q is not one of Allow, Forbid, Replace", c.ConcurrencyPolicy)
	}
	errs.Range("prewarm_seconds", c.PrewarmSeconds, 0, MaxPrewarmSeconds)
}
