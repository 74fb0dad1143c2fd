// Package names derives the names of the objects that back a function,
// trigger or job outside the API, such as the Kubernetes objects of the
// cluster mode, from the API's names. It is the one place where those names
// are made, so that every name the API accepts (see
// validation.CheckName and validation.CheckNamespace) maps to valid objects:
//
//   - an API namespace maps to a Kubernetes namespace of its own,
//     "sless-fn-" and its name, where its custom resources and their
//     children live, as the first deployment of sless kept function
//     workloads apart: the cluster's own namespaces ("default",
//     "kube-system", sless's own "sless") are never a tenant's, whatever
//     the tenant is called, and label NamespaceLabel on the namespace (and
//     on the objects in it) gives the API namespace back when the name was
//     shortened;
//   - a child object's name is a fixed prefix and the API name, which makes
//     it a DNS-1035 label (it starts with a letter, as a Service name must,
//     even when the API name starts with a digit);
//   - a name that would exceed its object's limit keeps as much of the API
//     name as fits and ends in a hash of the whole API name, so distinct
//     API names give distinct object names.
//
// Every function here is deterministic: the same input gives the same name
// on every call, version and machine.
package names

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Limits of the Kubernetes objects the names are used for.
const (
	// MaxLabel is the limit of a DNS-1123/1035 label: Services,
	// Deployments whose pods take their name as a hostname, Jobs (whose
	// name is a pod label value) and label values.
	MaxLabel = 63
	// MaxCronJob is the limit of a CronJob name: the controller appends an
	// 11-character suffix for the Jobs it creates.
	MaxCronJob = 52
)

// hashLen is the number of hex digits of the hash that ends a shortened
// name.
const hashLen = 10

// Namespace is the Kubernetes namespace of the API namespace ns.
func Namespace(ns string) string { return fit("sless-fn-", ns, MaxLabel) }

// NamespaceLabel is the label whose value is the API namespace of a
// Kubernetes namespace (and of the objects sless keeps in it); an API
// namespace is a valid label value as it is.
const NamespaceLabel = "sless.kube5s.ru/namespace"

// ManagedByLabel, with the value ManagedBy, marks every Kubernetes object
// sless makes: a tenant's namespace, the objects of its functions,
// triggers and builds.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "sless"
)

// FieldManager is the field manager of every write sless makes to the API
// server, as the objects' managed fields show it.
const FieldManager = "sless"

// FunctionLabel is the label whose value is the name of the function
// (LabelValue of it) that an object of the cluster mode runs, such as its
// Deployment and pods.
const FunctionLabel = "sless.kube5s.ru/function"

// Deployment is the name of the Deployment that runs function fn.
func Deployment(fn string) string { return fit("fn-", fn, MaxLabel) }

// Service is the name of the Service in front of function fn's pods.
func Service(fn string) string { return fit("fn-", fn, MaxLabel) }

// EnvSecret is the name of the Secret that holds function fn's env.
func EnvSecret(fn string) string { return fit("fn-env-", fn, MaxLabel) }

// NetworkPolicy is the name of the NetworkPolicy of function fn's pods.
func NetworkPolicy(fn string) string { return fit("fn-", fn, MaxLabel) }

// ImagePullSecret is the name of the Secret, one per namespace, with the
// credentials function pods pull their images with. The names of a
// function's children start with "fn-", so none is the same.
const ImagePullSecret = "sless-image-pull"

// BuildJob is the name of the Job that builds function fn's code whose
// build key is key (any string, such as a hex digest).
func BuildJob(fn, key string) string { return fit("build-", fn+"-"+shortHash(key), MaxLabel) }

// CronJob is the name of the CronJob of cron trigger trigger.
func CronJob(trigger string) string { return fit("cron-", trigger, MaxCronJob) }

// Job is the name of the Kubernetes Job of run runID of job job.
func Job(job string, runID int64) string {
	return fit("job-", job+"-"+strconv.FormatInt(runID, 10), MaxLabel)
}

// TriggerLabel is the label whose value is the name of the trigger
// (LabelValue of it) that an object of the cluster mode serves, such as the
// Ingress of an http trigger.
const TriggerLabel = "sless.kube5s.ru/trigger"

// TriggerIngress is the name of the Ingress of http trigger trigger of API
// namespace ns. The Ingresses of every namespace share the sless server's
// namespace, so the name holds both: "trigger-", ns, "." and trigger (at
// most 135 characters, within the 253 of an Ingress name). Neither name
// has a dot, so distinct pairs give distinct names.
func TriggerIngress(ns, trigger string) string { return "trigger-" + ns + "." + trigger }

// LabelValue is v made into a valid label value: v itself when it fits in
// MaxLabel characters, else shortened with a hash as child names are. v
// must consist of characters a label value allows (as every API name
// does).
func LabelValue(v string) string { return fit("", v, MaxLabel) }

// fit returns prefix+name when it is at most max characters long, else
// prefix, as much of name as fits and "-" and a hash of name. The result
// never ends in "-" (a label must end with a letter or digit), so the
// shortened part has its trailing dashes removed.
func fit(prefix, name string, max int) string {
	if len(prefix)+len(name) <= max {
		return prefix + name
	}
	keep := strings.TrimRight(name[:max-len(prefix)-1-hashLen], "-")
	return prefix + keep + "-" + shortHash(name)
}

// shortHash is the first hashLen hex digits of the SHA-256 of s.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:hashLen]
}
