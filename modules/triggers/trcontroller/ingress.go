package trcontroller

import (
	"context"
	"errors"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"sless.kube5s.ru/sless/internal/crconv"
	"sless.kube5s.ru/sless/internal/names"
	"sless.kube5s.ru/sless/modules/reconciler"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/crstore"
	"sless.kube5s.ru/sless/modules/triggers/reconcile"
)

// Finalizer holds a deleted Trigger until its Ingress is deleted. Only the
// Triggers that have (or may have) an Ingress carry it, so that deleting any
// other trigger never waits for a leader.
const Finalizer = "sless.kube5s.ru/cleanup"

// ServicePort is the name of the port of the sless server's Service that
// the Ingresses route to (deploy/base/service.yaml).
const ServicePort = "http"

// IngressOptions say where the Ingresses of http triggers live and where
// they route. An Ingress routes to Services of its own namespace only, and
// every call must reach the sless server's /fn, so the Ingresses of every
// tenant live in the server's namespace, next to its Service.
type IngressOptions struct {
	// Namespace is the sless server's namespace, which holds the Ingresses.
	Namespace string
	// Service is the sless server's Service there, whose port ServicePort
	// serves /fn.
	Service string
}

var kindIngress = metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"}

// IngressPath is the path the Ingress of a trigger of function fn in API
// namespace ns routes (as a prefix: the function's own sub-paths too).
func IngressPath(ns, fn string) string { return "/fn/" + ns + "/" + fn }

// MakeIngress returns the Ingress of http trigger t, which has an ingress:
// in o.Namespace, named names.TriggerIngress, labelled with the trigger's
// API namespace and name, routing t.Ingress.Host's IngressPath (prefix) to
// o.Service's port ServicePort, with t.Ingress.ClassName and, when
// t.Ingress.TLSSecret is set, TLS for the host with that Secret.
func MakeIngress(t *triggers.Trigger, o IngressOptions) *networkingv1.Ingress {
	in := t.Ingress
	ing := &networkingv1.Ingress{
		TypeMeta: kindIngress,
		ObjectMeta: metav1.ObjectMeta{
			Name:      names.TriggerIngress(t.Namespace, t.Name),
			Namespace: o.Namespace,
			Labels: map[string]string{
				names.ManagedByLabel: names.ManagedBy,
				names.NamespaceLabel: t.Namespace,
				names.TriggerLabel:   names.LabelValue(t.Name),
			},
		},
		Spec: networkingv1.IngressSpec{
			Rules: []networkingv1.IngressRule{{
				Host: in.Host,
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{{
						Path:     IngressPath(t.Namespace, t.Function),
						PathType: ptr.To(networkingv1.PathTypePrefix),
						Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
							Name: o.Service, Port: networkingv1.ServiceBackendPort{Name: ServicePort},
						}},
					}},
				}},
			}},
		},
	}
	if in.ClassName != "" {
		ing.Spec.IngressClassName = ptr.To(in.ClassName)
	}
	if in.TLSSecret != "" {
		ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{in.Host}, SecretName: in.TLSSecret}}
	}
	return ing
}

// wantsIngress reports whether t routes through an Ingress: an enabled http
// trigger with an ingress. A disabled trigger routes nothing (its function
// answers 404 on /fn anyway); a trigger whose function is missing keeps its
// Ingress, through which /fn answers 404 until the function exists.
func wantsIngress(t *triggers.Trigger) bool {
	return t.Type == triggers.TypeHTTP && t.IsEnabled() && t.Ingress != nil
}

// withIngress is the leader's trigger reconciler: the core's (next, which
// applies triggers with runners), and the Ingress of every trigger that
// wants one, in o.Namespace. A trigger gets the finalizer before its
// Ingress is created and loses it once its Ingress is deleted, so that no
// Ingress outlives its trigger, even one deleted while no leader ran.
type withIngress struct {
	c        client.Client
	triggers *crstore.Triggers
	next     *reconcile.Reconciler
	applier  reconcile.Applier
	opts     IngressOptions
}

// Reconcile is a reconciler.Func.
func (r *withIngress) Reconcile(ctx context.Context, key triggers.Key) (reconciler.Result, error) {
	cr, err := r.triggers.GetCR(ctx, key)
	if errors.Is(err, triggers.ErrNotFound) {
		return r.next.Reconcile(ctx, key)
	}
	if err != nil {
		return reconciler.Result{}, err
	}
	has := controllerutil.ContainsFinalizer(cr, Finalizer)
	if cr.DeletionTimestamp != nil {
		// Stop it before it goes, as the core does once it is gone.
		r.applier.Remove(key)
		if !has {
			return reconciler.Result{}, nil
		}
		if err := r.deleteIngress(ctx, key); err != nil {
			return reconciler.Result{}, err
		}
		return reconciler.Result{}, r.triggers.RemoveFinalizer(ctx, key, Finalizer)
	}
	t := crconv.TriggerFromCR(cr, key.Namespace)
	switch {
	case wantsIngress(t):
		if !has {
			deleting, err := r.triggers.EnsureFinalizer(ctx, key, Finalizer)
			if err != nil || deleting {
				// Deleted meanwhile: the deletion's own event comes.
				return reconciler.Result{}, err
			}
		}
		if err := r.applyIngress(ctx, MakeIngress(t, r.opts)); err != nil {
			return reconciler.Result{}, err
		}
	case has:
		if err := r.deleteIngress(ctx, key); err != nil {
			return reconciler.Result{}, err
		}
		if err := r.triggers.RemoveFinalizer(ctx, key, Finalizer); err != nil {
			return reconciler.Result{}, err
		}
	}
	return r.next.Reconcile(ctx, key)
}

// applyIngress creates or updates ing with server-side apply, owning every
// field it sets: a field the trigger no longer sets (a class, TLS) is
// removed.
func (r *withIngress) applyIngress(ctx context.Context, ing *networkingv1.Ingress) error {
	if err := r.c.Patch(ctx, ing, client.Apply, client.FieldOwner(names.FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying ingress %s/%s: %w", ing.Namespace, ing.Name, err)
	}
	return nil
}

// deleteIngress deletes the Ingress of the trigger of key; a missing one is
// deleted already.
func (r *withIngress) deleteIngress(ctx context.Context, key triggers.Key) error {
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: r.opts.Namespace, Name: names.TriggerIngress(key.Namespace, key.Name)}}
	if err := r.c.Delete(ctx, ing); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting ingress %s/%s: %w", ing.Namespace, ing.Name, err)
	}
	return nil
}
