package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TriggerSpec is the desired state of a trigger: what runs its function
// (an HTTP call on /fn, a cron schedule, RabbitMQ messages). The fields of
// each type are in the object of the type's name; the REST API refuses the
// fields of other types than the trigger's.
type TriggerSpec struct {
	// Function is the name of the function, in the trigger's namespace.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Function string `json:"function"`

	// Type is http, cron or rabbitmq.
	// +kubebuilder:validation:Enum=http;cron;rabbitmq
	Type string `json:"type"`

	// Enabled false keeps the trigger without running it: a function whose
	// http triggers are all disabled answers 404 on /fn and scales to zero
	// in place; a disabled cron or rabbitmq trigger stops firing.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// HTTP holds the fields of http triggers.
	// +optional
	HTTP *HTTPTriggerSpec `json:"http,omitempty"`
	// Cron holds the fields of cron triggers.
	// +optional
	Cron *CronTriggerSpec `json:"cron,omitempty"`
	// RabbitMQ holds the fields of rabbitmq triggers.
	// +optional
	RabbitMQ *RabbitMQTriggerSpec `json:"rabbitmq,omitempty"`
}

// HTTPTriggerSpec holds the fields of http triggers.
type HTTPTriggerSpec struct {
	// Auth is none (anyone may call the function on /fn) or token (only
	// callers with a token of the function's namespace).
	// +kubebuilder:validation:Enum=none;token
	// +kubebuilder:default=none
	// +optional
	Auth string `json:"auth,omitempty"`

	// Ingress, when set, asks for an Ingress that routes Host's
	// /fn/{namespace}/{function} (prefix) to the sless server's Service:
	// calls go through /fn, never straight to the function's pods. It lives
	// in the sless server's namespace and exists while the trigger is
	// enabled.
	// +optional
	Ingress *IngressSpec `json:"ingress,omitempty"`
}

// IngressSpec is the Ingress of an http trigger.
type IngressSpec struct {
	// Host is the DNS name the Ingress serves, such as hello.example.com.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Host string `json:"host"`

	// ClassName is the IngressClass; empty means the cluster's default.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	ClassName string `json:"className,omitempty"`

	// TLSSecret names a kubernetes.io/tls Secret of the sless server's
	// namespace with Host's certificate; empty means plain HTTP.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	TLSSecret string `json:"tlsSecret,omitempty"`
}

// CronTriggerSpec holds the fields of cron triggers.
type CronTriggerSpec struct {
	// Schedule is a 5-field cron expression, a descriptor such as @hourly,
	// or "@every <duration>".
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Schedule string `json:"schedule,omitempty"`

	// Timezone is the IANA time zone of Schedule; empty means UTC.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Timezone string `json:"timezone,omitempty"`

	// Payload is the JSON text of every run's event; empty means null. It
	// is text, not a YAML object, so that the function gets exactly the
	// JSON written here (numbers of any size, keys in their order).
	// +kubebuilder:validation:MaxLength=262144
	// +optional
	Payload string `json:"payload,omitempty"`

	// ConcurrencyPolicy says what a run that would overlap the previous one
	// does, as for a CronJob: Allow it, Forbid (skip) it, or Replace the
	// running one.
	// +kubebuilder:validation:Enum=Allow;Forbid;Replace
	// +kubebuilder:default=Allow
	// +optional
	ConcurrencyPolicy string `json:"concurrencyPolicy,omitempty"`

	// PrewarmSeconds starts an instance this long before each run.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	// +optional
	PrewarmSeconds int32 `json:"prewarmSeconds,omitempty"`
}

// RabbitMQTriggerSpec holds the fields of rabbitmq triggers.
type RabbitMQTriggerSpec struct {
	// URL is the broker, amqp:// or amqps://, with its credentials.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	URL string `json:"url,omitempty"`

	// Queue is consumed; it is declared (durable) when missing.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Queue string `json:"queue,omitempty"`

	// Exchange and RoutingKey, when set, bind the queue to an existing
	// exchange.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Exchange string `json:"exchange,omitempty"`
	// +kubebuilder:validation:MaxLength=255
	// +optional
	RoutingKey string `json:"routingKey,omitempty"`

	// Prefetch is the most messages run at once.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +kubebuilder:default=10
	// +optional
	Prefetch int32 `json:"prefetch,omitempty"`

	// MaxRetries is how many times a failed message is retried, with
	// backoff, before it is dead-lettered.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=3
	// +optional
	MaxRetries *int32 `json:"maxRetries,omitempty"`

	// DeadLetterExchange or DeadLetterQueue receive the messages that
	// failed every retry; with neither, they are rejected (the queue's own
	// dead-letter settings apply).
	// +kubebuilder:validation:MaxLength=255
	// +optional
	DeadLetterExchange string `json:"deadLetterExchange,omitempty"`
	// +kubebuilder:validation:MaxLength=255
	// +optional
	DeadLetterQueue string `json:"deadLetterQueue,omitempty"`
}

// TriggerStatus is the observed state of a trigger.
type TriggerStatus struct {
	// Phase is Active, Disabled, or Error (Message says why).
	// +kubebuilder:validation:Enum=Active;Disabled;Error
	// +optional
	Phase string `json:"phase,omitempty"`

	// Message says why the trigger is in the Error phase.
	// +kubebuilder:validation:MaxLength=32768
	// +optional
	Message string `json:"message,omitempty"`

	// LastFiredAt is when the trigger last invoked its function.
	// +optional
	LastFiredAt *metav1.MicroTime `json:"lastFiredAt,omitempty"`

	// LastError is the last failure of an invocation or of the trigger, or
	// the reason of the last skip or dead letter; LastErrorAt is when it
	// happened.
	// +kubebuilder:validation:MaxLength=32768
	// +optional
	LastError string `json:"lastError,omitempty"`
	// +optional
	LastErrorAt *metav1.MicroTime `json:"lastErrorAt,omitempty"`

	// NextFireAt is a cron trigger's next run.
	// +optional
	NextFireAt *metav1.MicroTime `json:"nextFireAt,omitempty"`

	// Counts of runs since the trigger was created.
	// +optional
	Fired int64 `json:"fired,omitempty"`
	// +optional
	Succeeded int64 `json:"succeeded,omitempty"`
	// +optional
	Failed int64 `json:"failed,omitempty"`
	// +optional
	Skipped int64 `json:"skipped,omitempty"`
	// +optional
	DeadLettered int64 `json:"deadLettered,omitempty"`

	// ObservedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Trigger runs a function on HTTP calls, on a cron schedule or on RabbitMQ
// messages.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tr,categories=sless
// +kubebuilder:selectablefield:JSONPath=`.spec.function`
// +kubebuilder:printcolumn:name="Function",type=string,JSONPath=`.spec.function`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Enabled",type=boolean,JSONPath=`.spec.enabled`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Next",type=string,JSONPath=`.status.nextFireAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="name must be at most 63 characters: lower-case letters, digits and '-', starting and ending with a letter or digit"
type Trigger struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TriggerSpec `json:"spec"`
	// +optional
	Status TriggerStatus `json:"status,omitempty"`
}

// TriggerList is a list of triggers.
//
// +kubebuilder:object:root=true
type TriggerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Trigger `json:"items"`
}
