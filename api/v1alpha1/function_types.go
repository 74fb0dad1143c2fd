package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FunctionSpec is the desired state of a function: the REST API's function
// fields (timeout_seconds is timeoutSeconds here) and the SHA-256 of its
// uploaded code. The limits and defaults are the README's.
//
// +kubebuilder:validation:XValidation:rule="self.minInstances <= self.maxInstances",message="minInstances must not exceed maxInstances"
type FunctionSpec struct {
	// Runtime is a runtime the server knows, such as python3.11 or nodejs20
	// (GET /v1/runtimes lists them).
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9._-]{0,31}$`
	Runtime string `json:"runtime"`

	// Handler is "<module>.<function>": empty means the runtime's default
	// (handler.handle).
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Handler string `json:"handler,omitempty"`

	// Env is the function's environment: at most 256 variables whose names
	// are at most 256 bytes, match [A-Za-z_][A-Za-z0-9_]* and do not start
	// with SLESS_ (names and values of at most 64 KiB in all; the REST API
	// checks the total).
	// +kubebuilder:validation:MaxProperties=256
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 256 && k.matches('^[A-Za-z_][A-Za-z0-9_]*$') && !k.startsWith('SLESS_'))",message="variable names must match [A-Za-z_][A-Za-z0-9_]*, be at most 256 bytes long and not start with SLESS_"
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(self[k]) <= 65536)",message="a variable's value must be at most 64 KiB"
	// +optional
	Env map[string]string `json:"env,omitempty"`

	// TimeoutSeconds bounds one invocation.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=900
	// +kubebuilder:default=30
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`

	// MemoryMB bounds an instance's memory.
	// +kubebuilder:validation:Minimum=32
	// +kubebuilder:validation:Maximum=16384
	// +kubebuilder:default=256
	// +optional
	MemoryMB int32 `json:"memoryMB,omitempty"`

	// MinInstances are kept running; 0 scales the function to zero when it
	// is idle.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=0
	// +optional
	MinInstances int32 `json:"minInstances"`

	// MaxInstances caps the function's instances.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=10
	// +optional
	MaxInstances int32 `json:"maxInstances,omitempty"`

	// Concurrency caps the invocations one instance runs at once.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +kubebuilder:default=1
	// +optional
	Concurrency int32 `json:"concurrency,omitempty"`

	// Egress is what the instances may reach over the network: all, or
	// public (not the host, loopback or private networks).
	// +kubebuilder:validation:Enum=all;public
	// +kubebuilder:default=all
	// +optional
	Egress string `json:"egress,omitempty"`

	// CodeSHA256 is the SHA-256 (hex) of the last uploaded zip, which the
	// REST API's upload sets; empty before the first upload.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[0-9a-f]*$`
	// +optional
	CodeSHA256 string `json:"codeSHA256,omitempty"`
}

// FunctionStatus is the observed state of a function, written by its
// reconciler only.
type FunctionStatus struct {
	// Phase is Pending (no code yet, or not reconciled yet), Building,
	// Ready or Failed.
	// +kubebuilder:validation:Enum=Pending;Building;Ready;Failed
	// +optional
	Phase string `json:"phase,omitempty"`

	// Message says why the function is not Ready.
	// +kubebuilder:validation:MaxLength=32768
	// +optional
	Message string `json:"message,omitempty"`

	// URL is where /fn serves the function: the sless server's public
	// address and /fn/{namespace}/{name}, written with every status when
	// the server knows its public address.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	URL string `json:"url,omitempty"`

	// CodeSHA256 is the code of the artifact that serves invocations.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	CodeSHA256 string `json:"codeSHA256,omitempty"`

	// BuildLog is the output of the last build that produced any (its last
	// 64 KiB).
	// +kubebuilder:validation:MaxLength=65536
	// +optional
	BuildLog string `json:"buildLog,omitempty"`

	// ObservedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// UpdatedAt is when the phase or message last changed.
	// +optional
	UpdatedAt *metav1.MicroTime `json:"updatedAt,omitempty"`

	// Conditions detail the phase: BuildSucceeded (reasons NoCode,
	// Building, Built, BuildFailed, BuildError) and Ready (Serving, or what
	// holds it back: NoCode, Building, Deploying, BuildFailed, BuildError,
	// Unsupported).
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Artifact is the builder's reference of the serving artifact (an image
	// reference in the cluster mode). The reconciler's bookkeeping, as are
	// the fields below.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Artifact string `json:"artifact,omitempty"`

	// ArtifactRuntime and ArtifactHandler are the runtime and handler the
	// artifact was built for: the function serves with them until a build
	// for a newer spec succeeds.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	ArtifactRuntime string `json:"artifactRuntime,omitempty"`
	// +kubebuilder:validation:MaxLength=256
	// +optional
	ArtifactHandler string `json:"artifactHandler,omitempty"`

	// BuildKey is the key of the build running or last finished, so that
	// the same code is never built twice.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	BuildKey string `json:"buildKey,omitempty"`
}

// Function is a function: code that sless builds and runs on HTTP calls,
// triggers and jobs.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fn,categories=sless
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Runtime",type=string,JSONPath=`.spec.runtime`
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.status.url`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="name must be at most 63 characters: lower-case letters, digits and '-', starting and ending with a letter or digit"
type Function struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec FunctionSpec `json:"spec"`
	// +optional
	Status FunctionStatus `json:"status,omitempty"`
}

// FunctionList is a list of functions.
//
// +kubebuilder:object:root=true
type FunctionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Function `json:"items"`
}
