// Package v1alpha1 holds the custom resources of sless's cluster mode, in
// group sless.kube5s.ru: Function, Trigger and FunctionJob. They carry the
// same fields as the REST API's objects, in camelCase, and the desired state
// (spec) and observed state (status, a subresource) of one object each; the
// REST types map to them in package convert.
//
// The kubebuilder markers are the CRDs' validation, defaults and printer
// columns; hack/generate.sh turns them into deploy/base/crds and
// zz_generated.deepcopy.go.
//
// +kubebuilder:object:generate=true
// +groupName=sless.kube5s.ru
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of the resources of this package.
var GroupVersion = schema.GroupVersion{Group: "sless.kube5s.ru", Version: "v1alpha1"}

// SchemeBuilder registers the resources of this package into a scheme.
var SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

// AddToScheme adds the resources of this package to a scheme; clients of
// the cluster mode add it next to client-go's.
var AddToScheme = SchemeBuilder.AddToScheme

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Function{}, &FunctionList{},
		&Trigger{}, &TriggerList{},
		&FunctionJob{}, &FunctionJobList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
