// Package kube is the cluster mode's executor: a function runs as a
// Deployment of its image with a Service in front, in the Kubernetes
// namespace of its API namespace (names.Namespace).
//
// Deployer is the control-plane side (runtime.Deployer): it applies a
// function's objects with server-side apply and reads how far the rollout
// got from the Deployment's status, never waiting for it. The objects are
// built by pure functions (MakeDeployment, MakeService, MakeNetworkPolicy,
// MakeEnvSecret, and per namespace MakeNamespace and MakePullSecret), which
// hold every decision about what a function's pods look like:
//
//   - the image is the build's digest-pinned reference (the crane builder's
//     artifact), run with its own entrypoint and command (the image layout,
//     runtime.ImageLayout), which serve on runtime.ImagePort;
//   - the pods meet the "restricted" Pod Security profile, which their
//     namespace enforces: not root, a read-only root filesystem with a
//     memory-backed /tmp, no privilege escalation, no capabilities, the
//     runtime's default seccomp profile, no service-account token;
//   - a NetworkPolicy admits traffic only from sless's own pods, and for
//     public egress (runtime.EgressPublic) lets them reach only the
//     cluster's DNS and public addresses;
//   - the function's env is in a Secret of its own, not in the Deployment;
//   - replicas: min_instances, but at least one while nothing in the cluster
//     mode starts a pod for an invocation, and none while suspended (all
//     http triggers disabled), scaled in place.
//
// Instances is the data-plane side until the cluster mode routes
// invocations to pods: it refuses them with runtime.ErrUnavailable.
package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	k8svalidation "k8s.io/apimachinery/pkg/util/validation"

	"sless.kube5s.ru/sless/internal/names"
)

// Labels and annotations of the objects the executor makes.
const (
	// LabelFunction carries the function's name (names.LabelValue of it)
	// on every object of a function and on its pods; the Deployment, the
	// Service and the NetworkPolicy select the pods by it alone.
	LabelFunction = names.FunctionLabel
	// AnnotationVersion on a pod template is the runtime.Target's Version
	// its pods run: a new version changes the template, which rolls the
	// pods.
	AnnotationVersion = "sless.kube5s.ru/version"
)

// Options are the server-level settings of the function pods, the same for
// every function. The zero value is usable: see each field's default.
type Options struct {
	// ImagePullSecret is a docker config.json (the .dockerconfigjson of an
	// image pull secret, the file of --image-docker-config) with the
	// credentials of the registry the images are pulled from; it is copied
	// into every tenant namespace. Default: none (the nodes pull with their
	// own credentials or anonymously).
	ImagePullSecret []byte
	// RuntimeClassName runs the function pods with this RuntimeClass, such
	// as gVisor's or Kata Containers' (which the cluster must have).
	// Default: none, the cluster's default runtime.
	RuntimeClassName string
	// ControlPlane selects sless's own pods: the only pods the function
	// pods admit traffic from. Default: namespace "sless", label
	// app.kubernetes.io/name=sless.
	ControlPlane Peer
	// DNS selects the cluster's DNS pods, which the pods of a function with
	// public egress may reach on port 53. Default: namespace "kube-system",
	// label k8s-app=kube-dns (CoreDNS's too).
	DNS Peer
	// TmpMB is the size of a pod's /tmp (memory-backed, so counted in the
	// function's memory_mb, as in the embedded mode's sandbox). Default 64.
	TmpMB int
}

// Peer selects pods by namespace and labels.
type Peer struct {
	// Namespace is the pods' namespace.
	Namespace string
	// Labels are labels the pods have, all of them.
	Labels map[string]string
}

// defaults fills the zero fields of o.
func (o Options) defaults() Options {
	if o.ControlPlane.Namespace == "" && len(o.ControlPlane.Labels) == 0 {
		o.ControlPlane = Peer{Namespace: "sless", Labels: map[string]string{"app.kubernetes.io/name": "sless"}}
	}
	if o.DNS.Namespace == "" && len(o.DNS.Labels) == 0 {
		o.DNS = Peer{Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"}}
	}
	if o.TmpMB == 0 {
		o.TmpMB = 64
	}
	return o
}

// check reports the first invalid setting of o (after defaults).
func (o Options) check() error {
	if len(o.ImagePullSecret) > 0 && !json.Valid(o.ImagePullSecret) {
		return errors.New("image pull secret: not a docker config.json (invalid JSON)")
	}
	if o.RuntimeClassName != "" {
		if errs := k8svalidation.IsDNS1123Subdomain(o.RuntimeClassName); len(errs) > 0 {
			return fmt.Errorf("runtime class name %q: %s", o.RuntimeClassName, strings.Join(errs, "; "))
		}
	}
	if err := o.ControlPlane.check(); err != nil {
		return fmt.Errorf("control plane pods: %w", err)
	}
	if err := o.DNS.check(); err != nil {
		return fmt.Errorf("DNS pods: %w", err)
	}
	if o.TmpMB < 1 {
		return fmt.Errorf("size of /tmp: %d MB; want at least 1", o.TmpMB)
	}
	return nil
}

// check reports an invalid namespace or label of p.
func (p Peer) check() error {
	if errs := k8svalidation.IsDNS1123Label(p.Namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %s", p.Namespace, strings.Join(errs, "; "))
	}
	if len(p.Labels) == 0 {
		// An empty selector would admit every pod of the namespace.
		return errors.New("no labels select the pods")
	}
	for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
		v := p.Labels[k]
		if errs := k8svalidation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("label %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := k8svalidation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("label %s=%q: %s", k, v, strings.Join(errs, "; "))
		}
	}
	return nil
}

// labels are the labels of every object of function fn of API namespace
// ns and of its pods: with names.NamespaceLabel and LabelFunction, an
// object names its function, which the cluster mode's controllers map its
// events to.
func labels(ns, fn string) map[string]string {
	return map[string]string{names.ManagedByLabel: names.ManagedBy, names.NamespaceLabel: ns, LabelFunction: names.LabelValue(fn)}
}

// selector selects function fn's pods.
func selector(fn string) map[string]string {
	return map[string]string{LabelFunction: names.LabelValue(fn)}
}
