package rabbitmq

import (
	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/triggers"
)

// Limits of rabbitmq trigger fields.
const (
	MaxPrefetch     = 1000
	MaxRetriesLimit = 100
	// MaxURLBytes caps a broker URL.
	MaxURLBytes = 2048
	// MaxAMQPNameBytes caps queue and exchange names and routing keys: AMQP
	// sends them as short strings of at most 255 bytes.
	MaxAMQPNameBytes = 255
)

// Type is the rabbitmq trigger type, for triggers.NewTypes. It is a
// triggers.Redactor: API answers show the URL through RedactURL.
type Type struct{}

// Name implements triggers.Type.
func (Type) Name() string { return triggers.TypeRabbitMQ }

// ApplyDefaults implements triggers.Type.
func (Type) ApplyDefaults(spec *triggers.Spec) {
	if spec.Prefetch == 0 {
		spec.Prefetch = DefaultPrefetch
	}
	if spec.MaxRetries == nil {
		n := DefaultMaxRetries
		spec.MaxRetries = &n
	}
}

// Validate implements triggers.Type.
func (Type) Validate(spec *triggers.Spec, errs *validation.Errors) {
	r := &spec.RabbitMQSpec
	if r.URL == "" {
		errs.Add("url", "is required for rabbitmq triggers, e.g. amqp://user:password@host:5672/vhost")
	} else if errs.MaxLen("url", r.URL, MaxURLBytes) {
		if err := ValidateURL(r.URL); err != nil {
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

// Redact implements triggers.Redactor.
func (Type) Redact(spec *triggers.Spec) {
	if spec.URL != "" {
		spec.URL = RedactURL(spec.URL)
	}
}

// Unredact implements triggers.Redactor.
func (Type) Unredact(spec, old *triggers.Spec) {
	if spec.URL != "" && spec.URL == RedactURL(old.URL) {
		spec.URL = old.URL
	}
}
