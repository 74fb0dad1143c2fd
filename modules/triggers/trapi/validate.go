package trapi

import (
	"bytes"
	"encoding/json"
	"errors"

	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/cron"
	"sless.kube5s.ru/sless/modules/triggers/rabbitmq"
)

// Limits of trigger and job fields.
const (
	MaxPrefetch       = 1000
	MaxRetriesLimit   = 100
	MaxPrewarmSeconds = 3600
	// MaxPayloadBytes caps cron and job payloads.
	MaxPayloadBytes = 256 << 10
	// MaxScheduleBytes caps a cron schedule, far beyond any real one.
	MaxScheduleBytes = 256
	// MaxTimezoneBytes caps a time zone name (the longest IANA name has 30).
	MaxTimezoneBytes = 64
	// MaxURLBytes caps a broker URL.
	MaxURLBytes = 2048
	// MaxAMQPNameBytes caps queue and exchange names and routing keys: AMQP
	// sends them as short strings of at most 255 bytes.
	MaxAMQPNameBytes = 255
)

// applyTriggerDefaults fills the fields with defaults.
func applyTriggerDefaults(t *triggers.Trigger) {
	if t.Enabled == nil {
		on := true
		t.Enabled = &on
	}
	switch t.Type {
	case triggers.TypeHTTP:
		if t.Auth == "" {
			t.Auth = triggers.AuthNone
		}
	case triggers.TypeCron:
		if t.ConcurrencyPolicy == "" {
			t.ConcurrencyPolicy = triggers.PolicyAllow
		}
	case triggers.TypeRabbitMQ:
		if t.Prefetch == 0 {
			t.Prefetch = rabbitmq.DefaultPrefetch
		}
		if t.MaxRetries == nil {
			n := rabbitmq.DefaultMaxRetries
			t.MaxRetries = &n
		}
	}
}

// validateTrigger checks a trigger after applyTriggerDefaults and names every
// bad field.
func validateTrigger(t *triggers.Trigger) error {
	errs := &validation.Errors{Resource: "trigger"}
	errs.Name("name", t.Name)
	errs.Namespace("namespace", t.Namespace)
	errs.Name("function", t.Function)
	switch t.Type {
	case triggers.TypeHTTP:
		if t.Auth != triggers.AuthNone && t.Auth != triggers.AuthToken {
			errs.Add("auth", "%.32q is not one of none, token", t.Auth)
		}
		onlyFor(errs, t, "cron", "rabbitmq")
	case triggers.TypeCron:
		validateCron(errs, &t.CronSpec)
		onlyFor(errs, t, "http", "rabbitmq")
	case triggers.TypeRabbitMQ:
		validateRabbitMQ(errs, &t.RabbitMQSpec)
		onlyFor(errs, t, "http", "cron")
	case "":
		errs.Add("type", "is required: http, cron or rabbitmq")
	default:
		// %.32q: an enum's message need not quote a value of any length.
		errs.Add("type", "%.32q is not one of http, cron, rabbitmq", t.Type)
	}
	return errs.Err()
}

// onlyFor reports the fields of the other types that a trigger sets.
func onlyFor(errs *validation.Errors, t *triggers.Trigger, others ...string) {
	c, r := &t.CronSpec, &t.RabbitMQSpec
	fieldsOf := map[string][]struct {
		name string
		set  bool
	}{
		"http": {{"auth", t.Auth != ""}},
		"cron": {{"schedule", c.Schedule != ""}, {"timezone", c.Timezone != ""}, {"payload", len(c.Payload) > 0},
			{"concurrency_policy", c.ConcurrencyPolicy != ""}, {"prewarm_seconds", c.PrewarmSeconds != 0}},
		"rabbitmq": {{"url", r.URL != ""}, {"queue", r.Queue != ""}, {"exchange", r.Exchange != ""},
			{"routing_key", r.RoutingKey != ""}, {"prefetch", r.Prefetch != 0}, {"max_retries", r.MaxRetries != nil},
			{"dead_letter_exchange", r.DeadLetterExchange != ""}, {"dead_letter_queue", r.DeadLetterQueue != ""}},
	}
	for _, other := range others {
		for _, f := range fieldsOf[other] {
			if f.set {
				errs.Add(f.name, "is a field of %s triggers, not of %s triggers", other, t.Type)
			}
		}
	}
}

func validateCron(errs *validation.Errors, c *triggers.CronSpec) {
	// The parser's messages quote the schedule and the time zone.
	scheduleOK := errs.MaxLen("schedule", c.Schedule, MaxScheduleBytes)
	timezoneOK := errs.MaxLen("timezone", c.Timezone, MaxTimezoneBytes)
	switch {
	case c.Schedule == "":
		errs.Add("schedule", "is required for cron triggers, e.g. \"*/5 * * * *\", \"@hourly\" or \"@every 30s\"")
	case scheduleOK && timezoneOK:
		if _, err := cron.ParseSchedule(c.Schedule, c.Timezone); err != nil {
			// The parser names the field (schedule or timezone).
			var ve *validation.Errors
			if !errors.As(err, &ve) {
				errs.Add("schedule", "%v", err)
			} else {
				errs.Fields = append(errs.Fields, ve.Fields...)
			}
		}
	}
	checkPayload(errs, "payload", c.Payload)
	switch c.ConcurrencyPolicy {
	case triggers.PolicyAllow, triggers.PolicyForbid, triggers.PolicyReplace:
	default:
		errs.Add("concurrency_policy", "%.32q is not one of Allow, Forbid, Replace", c.ConcurrencyPolicy)
	}
	errs.Range("prewarm_seconds", c.PrewarmSeconds, 0, MaxPrewarmSeconds)
}

func checkPayload(errs *validation.Errors, field string, payload json.RawMessage) {
	if len(payload) > MaxPayloadBytes {
		errs.Add(field, "is %d bytes; the limit is %d", len(payload), MaxPayloadBytes)
	}
	if len(payload) > 0 && !json.Valid(payload) {
		errs.Add(field, "must be JSON")
	}
}

func validateRabbitMQ(errs *validation.Errors, r *triggers.RabbitMQSpec) {
	if r.URL == "" {
		errs.Add("url", "is required for rabbitmq triggers, e.g. amqp://user:password@host:5672/vhost")
	} else if errs.MaxLen("url", r.URL, MaxURLBytes) {
		if err := rabbitmq.ValidateURL(r.URL); err != nil {
			errs.Add("url", "%v", err)
		}
	}
	for _, f := range []struct{ name, value string }{{"queue", r.Queue}, {"exchange", r.Exchange}, {"routing_key", r.RoutingKey},
		{"dead_letter_exchange", r.DeadLetterExchange}, {"dead_letter_queue", r.DeadLetterQueue}} {
		errs.MaxLen(f.name, f.value, MaxAMQPNameBytes)
	}
	if r.Queue == "" {
		errs.Add("queue", "is required for rabbitmq triggers")
	}
	if r.RoutingKey != "" && r.Exchange == "" {
		errs.Add("routing_key", "needs an exchange to bind the queue to")
	}
	errs.Range("prefetch", r.Prefetch, 1, MaxPrefetch)
	errs.Range("max_retries", *r.MaxRetries, 0, MaxRetriesLimit)
	if r.DeadLetterExchange != "" && r.DeadLetterQueue != "" {
		errs.Add("dead_letter_queue", "set dead_letter_exchange or dead_letter_queue, not both")
	}
	if r.DeadLetterQueue != "" && r.DeadLetterQueue == r.Queue {
		errs.Add("dead_letter_queue", "must differ from the consumed queue")
	}
}

// validateJob checks a job.
func validateJob(j *triggers.Job) error {
	errs := &validation.Errors{Resource: "job"}
	errs.Name("name", j.Name)
	errs.Namespace("namespace", j.Namespace)
	errs.Name("function", j.Function)
	checkPayload(errs, "payload", j.Payload)
	if j.RunID < 0 {
		errs.Add("run_id", "must not be negative (0 means do not run)")
	}
	return errs.Err()
}

// compactJSON normalizes a payload so that equal payloads compare equal.
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
