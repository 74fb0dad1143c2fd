package trcontroller_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/trcontroller"
)

// TestMakeIngress: the Ingress of an http trigger lives in the server's
// namespace, is named and labelled after the trigger, and routes its host's
// /fn/{namespace}/{function} prefix to the server's Service, with the class
// and TLS the trigger asks for and nothing it does not.
func TestMakeIngress(t *testing.T) {
	opts := trcontroller.IngressOptions{Namespace: "sless", Service: "sless"}
	backend := networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
		Name: "sless", Port: networkingv1.ServiceBackendPort{Name: "http"}}}
	rules := func(host, path string) []networkingv1.IngressRule {
		return []networkingv1.IngressRule{{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{
			HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: path, PathType: ptr.To(networkingv1.PathTypePrefix), Backend: backend}}}}}}
	}
	tests := []struct {
		name    string
		ingress triggers.IngressSpec
		opts    trcontroller.IngressOptions
		want    networkingv1.IngressSpec
	}{
		{"host only", triggers.IngressSpec{Host: "hello.example.com"}, opts,
			networkingv1.IngressSpec{Rules: rules("hello.example.com", "/fn/team-a/hello")}},
		{"a class", triggers.IngressSpec{Host: "hello.example.com", ClassName: "nginx"}, opts,
			networkingv1.IngressSpec{IngressClassName: ptr.To("nginx"), Rules: rules("hello.example.com", "/fn/team-a/hello")}},
		{"TLS", triggers.IngressSpec{Host: "hello.example.com", TLSSecret: "hello-tls"}, opts,
			networkingv1.IngressSpec{
				TLS:   []networkingv1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "hello-tls"}},
				Rules: rules("hello.example.com", "/fn/team-a/hello")}},
		{"another server", triggers.IngressSpec{Host: "h.example.org", ClassName: "traefik", TLSSecret: "t"},
			trcontroller.IngressOptions{Namespace: "platform", Service: "functions"},
			networkingv1.IngressSpec{
				IngressClassName: ptr.To("traefik"),
				TLS:              []networkingv1.IngressTLS{{Hosts: []string{"h.example.org"}, SecretName: "t"}},
				Rules: []networkingv1.IngressRule{{Host: "h.example.org", IngressRuleValue: networkingv1.IngressRuleValue{
					HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
						Path: "/fn/team-a/hello", PathType: ptr.To(networkingv1.PathTypePrefix),
						Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
							Name: "functions", Port: networkingv1.ServiceBackendPort{Name: "http"}}}}}}}}},
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.ingress
			tr := &triggers.Trigger{Name: "web", Namespace: "team-a", Spec: triggers.Spec{Function: "hello", Type: triggers.TypeHTTP,
				HTTPSpec: triggers.HTTPSpec{Auth: triggers.AuthNone, Ingress: &in}}}
			got := trcontroller.MakeIngress(tr, tc.opts)
			wantMeta := metav1.ObjectMeta{Name: "trigger-team-a.web", Namespace: tc.opts.Namespace, Labels: map[string]string{
				"app.kubernetes.io/managed-by": "sless", "sless.kube5s.ru/namespace": "team-a", "sless.kube5s.ru/trigger": "web"}}
			if diff := cmp.Diff(wantMeta, got.ObjectMeta); diff != "" {
				t.Errorf("metadata (-want +got):\n%s", diff)
			}
			if got.APIVersion != "networking.k8s.io/v1" || got.Kind != "Ingress" {
				t.Errorf("kind %s %s; want networking.k8s.io/v1 Ingress (server-side apply needs it)", got.APIVersion, got.Kind)
			}
			if diff := cmp.Diff(tc.want, got.Spec); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
		})
	}
}

// ingressNamespace creates the namespace of the server whose Ingresses a
// test makes.
func (c *cluster) ingressNamespace(t *testing.T) trcontroller.IngressOptions {
	t.Helper()
	ns := newNamespace()
	if err := c.env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return trcontroller.IngressOptions{Namespace: ns, Service: "sless"}
}

// getIngress reads the Ingress of the trigger of key, or nil when there is
// none.
func (c *cluster) getIngress(opts trcontroller.IngressOptions, key triggers.Key) (*networkingv1.Ingress, error) {
	var ing networkingv1.Ingress
	err := c.env.Client.Get(context.Background(),
		client.ObjectKey{Namespace: opts.Namespace, Name: "trigger-" + key.Namespace + "." + key.Name}, &ing)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return &ing, err
}

// TestIngressFollowsTheTrigger: the leader makes the Ingress of an http
// trigger that asks for one, in the server's namespace, updates it when
// the trigger's ingress changes, and deletes it when the trigger drops its
// ingress, is disabled, or is deleted; a deleted trigger is held by the
// finalizer until its Ingress is gone.
func TestIngressFollowsTheTrigger(t *testing.T) {
	c := newCluster(t)
	opts := c.ingressNamespace(t)
	c.ingress = opts
	c.start(t)
	ns := newNamespace()
	c.createFunction(t, ns, "hello")
	ctx := context.Background()
	tr := &triggers.Trigger{Name: "web", Namespace: ns, Spec: triggers.Spec{Function: "hello", Type: triggers.TypeHTTP,
		HTTPSpec: triggers.HTTPSpec{Auth: triggers.AuthNone,
			Ingress: &triggers.IngressSpec{Host: "hello.example.com", ClassName: "nginx", TLSSecret: "hello-tls"}}}}
	c.createTrigger(t, tr)

	// has waits for an Ingress of the host, class and TLS Secret given.
	has := func(what, host, class, secret string) {
		t.Helper()
		eventually(t, 30*time.Second, what, func() error {
			ing, err := c.getIngress(opts, tr.Key())
			if err != nil || ing == nil {
				return fmt.Errorf("ingress %v, %v", ing, err)
			}
			want := trcontroller.MakeIngress(&triggers.Trigger{Name: tr.Name, Namespace: ns, Spec: triggers.Spec{Function: "hello",
				Type: triggers.TypeHTTP, HTTPSpec: triggers.HTTPSpec{Ingress: &triggers.IngressSpec{Host: host, ClassName: class, TLSSecret: secret}}}}, opts)
			if diff := cmp.Diff(want.Spec, ing.Spec); diff != "" {
				return fmt.Errorf("spec (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want.Labels, ing.Labels); diff != "" {
				return fmt.Errorf("labels (-want +got):\n%s", diff)
			}
			return nil
		})
	}
	gone := func(what string) {
		t.Helper()
		eventually(t, 30*time.Second, what, func() error {
			ing, err := c.getIngress(opts, tr.Key())
			if err != nil || ing != nil {
				return fmt.Errorf("ingress %v, %v", ing, err)
			}
			return nil
		})
	}
	has("the Ingress created", "hello.example.com", "nginx", "hello-tls")
	// The Ingress is made before the core applies the trigger and writes
	// its status.
	eventually(t, 30*time.Second, "the trigger Active", func() error {
		if p := c.trigger(t, tr.Key()).Status.Phase; p != triggers.PhaseActive {
			return fmt.Errorf("phase %q; want Active", p)
		}
		return nil
	})
	// Only a Trigger with an Ingress holds the finalizer.
	hasFinalizer := func() bool {
		cr, err := c.triggers.GetCR(ctx, tr.Key())
		if err != nil {
			t.Fatal(err)
		}
		return len(cr.Finalizers) == 1 && cr.Finalizers[0] == trcontroller.Finalizer
	}
	if !hasFinalizer() {
		t.Error("a Trigger with an Ingress has no finalizer")
	}

	update := func(change func(*triggers.Spec)) {
		t.Helper()
		cur := c.trigger(t, tr.Key())
		spec := cur.Spec
		change(&spec)
		if _, err := c.triggers.UpdateSpec(ctx, tr.Key(), spec); err != nil {
			t.Fatal(err)
		}
	}
	// A new host, and no class or TLS any more: the fields are removed.
	update(func(s *triggers.Spec) { s.Ingress = &triggers.IngressSpec{Host: "hi.example.com"} })
	has("the Ingress updated", "hi.example.com", "", "")

	update(func(s *triggers.Spec) { s.Ingress = nil })
	gone("the Ingress deleted with the trigger's ingress")
	eventually(t, 10*time.Second, "the finalizer removed", func() error {
		if hasFinalizer() {
			return errors.New("still there")
		}
		return nil
	})

	update(func(s *triggers.Spec) { s.Ingress = &triggers.IngressSpec{Host: "hello.example.com"} })
	has("the Ingress back", "hello.example.com", "", "")
	update(func(s *triggers.Spec) { s.Enabled = ptr.To(false) })
	gone("the Ingress of a disabled trigger deleted")
	update(func(s *triggers.Spec) { s.Enabled = ptr.To(true) })
	has("the Ingress of an enabled trigger", "hello.example.com", "", "")

	if err := c.triggers.Delete(ctx, tr.Key()); err != nil {
		t.Fatal(err)
	}
	gone("the Ingress deleted with the trigger")
	eventually(t, 10*time.Second, "the trigger gone", func() error {
		_, err := c.triggers.Get(ctx, tr.Key())
		if !errors.Is(err, triggers.ErrNotFound) {
			return fmt.Errorf("get: %v", err)
		}
		return nil
	})
}

// TestIngressOfATriggerDeletedWithoutALeader: a trigger deleted while no
// replica leads keeps its finalizer, so the next leader deletes its
// Ingress before the trigger goes.
func TestIngressOfATriggerDeletedWithoutALeader(t *testing.T) {
	c := newCluster(t)
	opts := c.ingressNamespace(t)
	c.ingress = opts
	first := c.start(t)
	ns := newNamespace()
	c.createFunction(t, ns, "hello")
	tr := &triggers.Trigger{Name: "web", Namespace: ns, Spec: triggers.Spec{Function: "hello", Type: triggers.TypeHTTP,
		HTTPSpec: triggers.HTTPSpec{Ingress: &triggers.IngressSpec{Host: "hello.example.com"}}}}
	c.createTrigger(t, tr)
	eventually(t, 30*time.Second, "the Ingress created", func() error {
		ing, err := c.getIngress(opts, tr.Key())
		if err != nil || ing == nil {
			return fmt.Errorf("ingress %v, %v", ing, err)
		}
		return nil
	})
	first.stop()
	ctx := context.Background()
	if err := c.triggers.Delete(ctx, tr.Key()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if ing, err := c.getIngress(opts, tr.Key()); err != nil || ing == nil {
		t.Fatalf("with no leader the Ingress is %v, %v; want it kept until a leader cleans up", ing, err)
	}
	if _, err := c.triggers.GetCR(ctx, tr.Key()); err != nil {
		t.Fatalf("with no leader the Trigger is %v; want it held by its finalizer", err)
	}
	c.start(t)
	eventually(t, 60*time.Second, "the next leader deleting the Ingress and the trigger", func() error {
		ing, err := c.getIngress(opts, tr.Key())
		if err != nil || ing != nil {
			return fmt.Errorf("ingress %v, %v", ing, err)
		}
		if _, err := c.triggers.GetCR(ctx, tr.Key()); !errors.Is(err, triggers.ErrNotFound) {
			return fmt.Errorf("trigger: %v", err)
		}
		return nil
	})
}
