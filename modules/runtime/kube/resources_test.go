package kube

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"sless.kube5s.ru/sless/internal/names"
	"sless.kube5s.ru/sless/modules/runtime"
)

const testImage = "registry.example.com/sless/functions@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// quantities compares resource quantities by value, as the API server does.
var quantities = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

// target returns the target the tables start from, changed by mods.
func target(mods ...func(*runtime.Target)) *runtime.Target {
	t := &runtime.Target{
		Namespace: "team-a", Name: "hello", Version: "0123456789abcdef",
		Runtime: "python3.11", Artifact: testImage, Handler: "handler.handle",
		Env: map[string]string{"GREETING": "hi"}, MemoryMB: 256,
		MinInstances: 0, MaxInstances: 10, Concurrency: 1, Egress: runtime.EgressAll,
	}
	for _, m := range mods {
		m(t)
	}
	return t
}

var fnLabels = map[string]string{"app.kubernetes.io/managed-by": "sless", "sless.kube5s.ru/namespace": "team-a",
	"sless.kube5s.ru/function": "hello"}

// deployment returns the Deployment of target() with the default options,
// written out whole, changed by mods.
func deployment(mods ...func(*appsv1.Deployment)) *appsv1.Deployment {
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "fn-hello", Namespace: "sless-fn-team-a", Labels: fnLabels},
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptr.To[int32](1),
			Selector:             &metav1.LabelSelector{MatchLabels: map[string]string{"sless.kube5s.ru/function": "hello"}},
			RevisionHistoryLimit: ptr.To[int32](2),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      fnLabels,
					Annotations: map[string]string{"sless.kube5s.ru/version": "0123456789abcdef"},
				},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:            "function",
						Image:           testImage,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
						EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: "fn-env-hello"}}}},
						Env: []corev1.EnvVar{
							{Name: "HOME", Value: "/tmp"},
							{Name: "TMPDIR", Value: "/tmp"},
							{Name: "SLESS_FUNCTION", Value: "hello"},
							{Name: "SLESS_NAMESPACE", Value: "team-a"},
							{Name: "SLESS_CONCURRENCY", Value: "1"},
							{Name: "SLESS_ECHO_LOGS", Value: "1"},
						},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
						},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
								Path: "/_sless/health", Port: intstr.FromString("http")}},
							PeriodSeconds: 1, FailureThreshold: 3, SuccessThreshold: 1, TimeoutSeconds: 1,
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							RunAsNonRoot:             ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
					}},
					Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
						Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("64Mi"))}}}},
				},
			},
		},
	}
	for _, m := range mods {
		m(d)
	}
	return d
}

func container(d *appsv1.Deployment) *corev1.Container { return &d.Spec.Template.Spec.Containers[0] }

func TestMakeDeployment(t *testing.T) {
	long := strings.Repeat("a", 63)
	tests := []struct {
		name   string
		target *runtime.Target
		opts   Options
		want   *appsv1.Deployment
	}{{
		name:   "defaults: one replica for min_instances 0",
		target: target(),
		want:   deployment(),
	}, {
		name:   "min_instances sets the replicas",
		target: target(func(t *runtime.Target) { t.MinInstances = 3 }),
		want:   deployment(func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](3) }),
	}, {
		name:   "suspended scales to zero whatever min_instances",
		target: target(func(t *runtime.Target) { t.MinInstances, t.Suspended = 3, true }),
		want:   deployment(func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](0) }),
	}, {
		name:   "a new version changes the pod template",
		target: target(func(t *runtime.Target) { t.Version = "fedcba9876543210" }),
		want: deployment(func(d *appsv1.Deployment) {
			d.Spec.Template.Annotations["sless.kube5s.ru/version"] = "fedcba9876543210"
		}),
	}, {
		name:   "memory_mb is the request and the limit",
		target: target(func(t *runtime.Target) { t.MemoryMB = 1536 }),
		want: deployment(func(d *appsv1.Deployment) {
			c := container(d)
			c.Resources.Requests[corev1.ResourceMemory] = resource.MustParse("1536Mi")
			c.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1536Mi")
		}),
	}, {
		name:   "concurrency goes to the wrapper",
		target: target(func(t *runtime.Target) { t.Concurrency = 8 }),
		want:   deployment(func(d *appsv1.Deployment) { container(d).Env[4].Value = "8" }),
	}, {
		name:   "the function's own HOME and TMPDIR win",
		target: target(func(t *runtime.Target) { t.Env = map[string]string{"HOME": "/tmp/h", "TMPDIR": "/tmp/t"} }),
		want:   deployment(func(d *appsv1.Deployment) { container(d).Env = container(d).Env[2:] }),
	}, {
		name:   "runtime class, pull secret and /tmp size from the options",
		target: target(),
		opts:   Options{RuntimeClassName: "gvisor", ImagePullSecret: []byte(`{"auths":{}}`), TmpMB: 16},
		want: deployment(func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.RuntimeClassName = ptr.To("gvisor")
			d.Spec.Template.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "sless-image-pull"}}
			d.Spec.Template.Spec.Volumes[0].EmptyDir.SizeLimit = ptr.To(resource.MustParse("16Mi"))
		}),
	}, {
		name:   "a long name is shortened with a hash in names and labels alike",
		target: target(func(t *runtime.Target) { t.Name = long }),
		want: deployment(func(d *appsv1.Deployment) {
			l := map[string]string{"app.kubernetes.io/managed-by": "sless", "sless.kube5s.ru/namespace": "team-a",
				"sless.kube5s.ru/function": names.LabelValue(long)}
			d.Name, d.Labels, d.Spec.Template.Labels = names.Deployment(long), l, l
			d.Spec.Selector.MatchLabels = map[string]string{"sless.kube5s.ru/function": names.LabelValue(long)}
			container(d).EnvFrom[0].SecretRef.Name = names.EnvSecret(long)
			container(d).Env[2].Value = long
		}),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := MakeDeployment(tc.target, tc.opts)
			if diff := cmp.Diff(tc.want, got, quantities); diff != "" {
				t.Errorf("MakeDeployment (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMakeService(t *testing.T) {
	tests := []struct {
		name   string
		target *runtime.Target
		want   *corev1.Service
	}{{
		name:   "port 80 to the wrapper's port, selecting the function's pods",
		target: target(),
		want: &corev1.Service{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: metav1.ObjectMeta{Name: "fn-hello", Namespace: "sless-fn-team-a", Labels: fnLabels},
			Spec: corev1.ServiceSpec{
				Type:     corev1.ServiceTypeClusterIP,
				Selector: map[string]string{"sless.kube5s.ru/function": "hello"},
				Ports:    []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http")}},
			},
		},
	}, {
		name:   "a name starting with a digit still makes a valid Service name",
		target: target(func(t *runtime.Target) { t.Namespace, t.Name = "b", "9lives" }),
		want: &corev1.Service{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: metav1.ObjectMeta{Name: "fn-9lives", Namespace: "sless-fn-b",
				Labels: map[string]string{"app.kubernetes.io/managed-by": "sless", "sless.kube5s.ru/namespace": "b",
					"sless.kube5s.ru/function": "9lives"}},
			Spec: corev1.ServiceSpec{
				Type:     corev1.ServiceTypeClusterIP,
				Selector: map[string]string{"sless.kube5s.ru/function": "9lives"},
				Ports:    []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http")}},
			},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, MakeService(tc.target)); diff != "" {
				t.Errorf("MakeService (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMakeEnvSecret(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want map[string][]byte
	}{
		{"the env, whole", map[string]string{"A": "1", "DB_PASSWORD": "s3cret"}, map[string][]byte{"A": []byte("1"), "DB_PASSWORD": []byte("s3cret")}},
		{"an empty value stays", map[string]string{"EMPTY": ""}, map[string][]byte{"EMPTY": {}}},
		{"no env, an empty Secret", nil, map[string][]byte{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := &corev1.Secret{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
				ObjectMeta: metav1.ObjectMeta{Name: "fn-env-hello", Namespace: "sless-fn-team-a", Labels: fnLabels},
				Type:       corev1.SecretTypeOpaque,
				Data:       tc.want,
			}
			got := MakeEnvSecret(target(func(t *runtime.Target) { t.Env = tc.env }))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("MakeEnvSecret (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMakeNamespace(t *testing.T) {
	tests := []struct {
		ns   string
		want string
	}{
		{"team-a", "sless-fn-team-a"},
		{"0day", "sless-fn-0day"},
		{"default", "sless-fn-default"},
		{strings.Repeat("a", 63), "sless-fn-" + strings.Repeat("a", 43) + "-7d3e74a05d"},
	}
	for _, tc := range tests {
		t.Run(tc.ns, func(t *testing.T) {
			want := &corev1.Namespace{
				TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
				ObjectMeta: metav1.ObjectMeta{Name: tc.want, Labels: map[string]string{
					"app.kubernetes.io/managed-by":               "sless",
					"sless.kube5s.ru/namespace":                  tc.ns,
					"pod-security.kubernetes.io/enforce":         "restricted",
					"pod-security.kubernetes.io/enforce-version": "latest",
					"pod-security.kubernetes.io/warn":            "restricted",
					"pod-security.kubernetes.io/warn-version":    "latest",
					"pod-security.kubernetes.io/audit":           "restricted",
					"pod-security.kubernetes.io/audit-version":   "latest",
				}},
			}
			if diff := cmp.Diff(want, MakeNamespace(tc.ns)); diff != "" {
				t.Errorf("MakeNamespace(%q) (-want +got):\n%s", tc.ns, diff)
			}
		})
	}
}

func TestMakePullSecret(t *testing.T) {
	cfg := []byte(`{"auths":{"registry.example.com":{"auth":"dTpw"}}}`)
	tests := []struct {
		name string
		opts Options
		want *corev1.Secret
	}{
		{"none configured, none made", Options{}, nil},
		{"the docker config, in the tenant namespace", Options{ImagePullSecret: cfg}, &corev1.Secret{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: "sless-image-pull", Namespace: "sless-fn-team-a",
				Labels: map[string]string{"app.kubernetes.io/managed-by": "sless"}},
			Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{".dockerconfigjson": cfg},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, MakePullSecret("team-a", tc.opts)); diff != "" {
				t.Errorf("MakePullSecret (-want +got):\n%s", diff)
			}
		})
	}
}

// networkPolicy returns the NetworkPolicy of target() with the default
// options, written out whole, changed by mods.
func networkPolicy(mods ...func(*networkingv1.NetworkPolicy)) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: "fn-hello", Namespace: "sless-fn-team-a", Labels: fnLabels},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"sless.kube5s.ru/function": "hello"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "sless"}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "sless"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt(8080))}},
			}},
		},
	}
	for _, m := range mods {
		m(np)
	}
	return np
}

func TestMakeNetworkPolicy(t *testing.T) {
	publicEgress := func(dnsNS, dnsKey, dnsValue string) func(*networkingv1.NetworkPolicy) {
		return func(np *networkingv1.NetworkPolicy) {
			np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
			np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": dnsNS}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{dnsKey: dnsValue}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{
					{Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(intstr.FromInt(53))},
					{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt(53))},
				},
			}, {
				To: []networkingv1.NetworkPolicyPeer{
					{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{
						"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
						"192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4"}}},
					{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: []string{
						"64:ff9b::/96", "2002::/16",
						"::/96", "64:ff9b:1::/48", "fc00::/7", "fec0::/10", "fe80::/10", "ff00::/8"}}},
				},
			}}
		}
	}
	tests := []struct {
		name   string
		target *runtime.Target
		opts   Options
		want   *networkingv1.NetworkPolicy
	}{{
		name:   "ingress from sless only, egress open",
		target: target(),
		want:   networkPolicy(),
	}, {
		name:   "the control plane's pods from the options",
		target: target(),
		opts:   Options{ControlPlane: Peer{Namespace: "platform", Labels: map[string]string{"app": "sless-server"}}},
		want: networkPolicy(func(np *networkingv1.NetworkPolicy) {
			np.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] = "platform"
			np.Spec.Ingress[0].From[0].PodSelector.MatchLabels = map[string]string{"app": "sless-server"}
		}),
	}, {
		name:   "public egress: the cluster's DNS and public addresses only",
		target: target(func(t *runtime.Target) { t.Egress = runtime.EgressPublic }),
		want:   networkPolicy(publicEgress("kube-system", "k8s-app", "kube-dns")),
	}, {
		name:   "public egress with the DNS pods from the options",
		target: target(func(t *runtime.Target) { t.Egress = runtime.EgressPublic }),
		opts:   Options{DNS: Peer{Namespace: "dns", Labels: map[string]string{"app": "coredns"}}},
		want:   networkPolicy(publicEgress("dns", "app", "coredns")),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, MakeNetworkPolicy(tc.target, tc.opts)); diff != "" {
				t.Errorf("MakeNetworkPolicy (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodUserIsTheImageUser ties the pods' user to the image layout's.
func TestPodUserIsTheImageUser(t *testing.T) {
	if got := fmt.Sprintf("%d:%d", imageUID, imageGID); got != runtime.ImageUser {
		t.Errorf("pods run as %s, want the image's user %s", got, runtime.ImageUser)
	}
}

func TestOptionsCheck(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string // "" for valid
	}{
		{"zero value", Options{}, ""},
		{"all set", Options{ImagePullSecret: []byte(`{"auths":{}}`), RuntimeClassName: "kata-qemu",
			ControlPlane: Peer{Namespace: "platform", Labels: map[string]string{"app.kubernetes.io/name": "sless"}},
			DNS:          Peer{Namespace: "kube-system", Labels: map[string]string{"k8s-app": "coredns"}}, TmpMB: 128}, ""},
		{"pull secret not JSON", Options{ImagePullSecret: []byte("user:pass")}, "image pull secret: not a docker config.json (invalid JSON)"},
		{"runtime class not a name", Options{RuntimeClassName: "gVisor"}, `runtime class name "gVisor": a lowercase RFC 1123 subdomain`},
		{"control plane without labels would admit every pod", Options{ControlPlane: Peer{Namespace: "sless"}}, "control plane pods: no labels select the pods"},
		{"control plane namespace missing", Options{ControlPlane: Peer{Labels: map[string]string{"a": "b"}}}, `control plane pods: namespace ""`},
		{"DNS label invalid", Options{DNS: Peer{Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube dns"}}}, `DNS pods: label k8s-app="kube dns"`},
		{"negative /tmp", Options{TmpMB: -1}, "size of /tmp: -1 MB; want at least 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(nil, tc.opts)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("New: got %v, want no error", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("New: got error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
