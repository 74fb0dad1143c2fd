package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FunctionJobSpec is the desired state of a job: run Function once with
// Payload for every new RunID.
type FunctionJobSpec struct {
	// Function is the name of the function, in the job's namespace.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Function string `json:"function"`

	// Payload is the JSON text of the run's event; empty means null.
	// +kubebuilder:validation:MaxLength=262144
	// +optional
	Payload string `json:"payload,omitempty"`

	// RunID says which run is wanted: 0 runs nothing; raising it above the
	// status' runID runs the function once more (a run ID never runs
	// twice, also across restarts); lowering it does nothing.
	// +kubebuilder:validation:Minimum=0
	// +optional
	RunID int64 `json:"runID,omitempty"`
}

// FunctionJobStatus is the observed state of a job: the run of RunID.
type FunctionJobStatus struct {
	// Phase is Pending, Running, Succeeded or Failed.
	// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
	// +optional
	Phase string `json:"phase,omitempty"`

	// RunID is the run this status describes.
	// +kubebuilder:validation:Minimum=0
	// +optional
	RunID int64 `json:"runID,omitempty"`

	// InvocationID identifies the run's invocation in the invocation
	// ledger.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	InvocationID string `json:"invocationID,omitempty"`

	// StartedAt and FinishedAt are when the run started and ended.
	// +optional
	StartedAt *metav1.MicroTime `json:"startedAt,omitempty"`
	// +optional
	FinishedAt *metav1.MicroTime `json:"finishedAt,omitempty"`

	// StatusCode is the HTTP status of the function's answer.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=999
	// +optional
	StatusCode int32 `json:"statusCode,omitempty"`

	// Result is the function's answer body, at most 64 KiB.
	// +kubebuilder:validation:MaxLength=65536
	// +optional
	Result string `json:"result,omitempty"`

	// Error says why the run failed.
	// +kubebuilder:validation:MaxLength=32768
	// +optional
	Error string `json:"error,omitempty"`

	// ObservedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// FunctionJob runs a function once for each new run ID.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fnjob,categories=sless
// +kubebuilder:selectablefield:JSONPath=`.spec.function`
// +kubebuilder:printcolumn:name="Function",type=string,JSONPath=`.spec.function`
// +kubebuilder:printcolumn:name="Run ID",type=integer,JSONPath=`.spec.runID`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Status",type=integer,JSONPath=`.status.statusCode`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="name must be at most 63 characters: lower-case letters, digits and '-', starting and ending with a letter or digit"
type FunctionJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec FunctionJobSpec `json:"spec"`
	// +optional
	Status FunctionJobStatus `json:"status,omitempty"`
}

// FunctionJobList is a list of jobs.
//
// +kubebuilder:object:root=true
type FunctionJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FunctionJob `json:"items"`
}
