package kube

import (
	"maps"
	"slices"
	"strconv"

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

// The user and group of runtime.ImageUser, which a pod names explicitly so
// that the kubelet can check runAsNonRoot whatever the image says.
const (
	imageUID = 65532
	imageGID = 65532
)

// The pod's container, port and /tmp volume.
const (
	containerName = "function"
	portName      = "http"
	tmpVolume     = "tmp"
)

// servicePort is the port of a function's Service.
const servicePort = 80

// podSecurityLevel is the Pod Security Standards level that tenant
// namespaces enforce.
const podSecurityLevel = "restricted"

// Kinds the Make functions set, so that the objects can be applied as they
// are.
var (
	kindNamespace     = metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}
	kindSecret        = metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}
	kindService       = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
	kindDeployment    = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	kindNetworkPolicy = metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"}
)

// MakeNamespace returns the Kubernetes namespace of API namespace ns: it
// enforces the "restricted" Pod Security profile (and warns and audits with
// it), so that no pod that breaks it can run there, whoever creates it.
func MakeNamespace(ns string) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta: kindNamespace,
		ObjectMeta: metav1.ObjectMeta{
			Name: names.Namespace(ns),
			Labels: map[string]string{
				names.ManagedByLabel:                         names.ManagedBy,
				names.NamespaceLabel:                         ns,
				"pod-security.kubernetes.io/enforce":         podSecurityLevel,
				"pod-security.kubernetes.io/enforce-version": "latest",
				"pod-security.kubernetes.io/warn":            podSecurityLevel,
				"pod-security.kubernetes.io/warn-version":    "latest",
				"pod-security.kubernetes.io/audit":           podSecurityLevel,
				"pod-security.kubernetes.io/audit-version":   "latest",
			},
		},
	}
}

// MakePullSecret returns the image pull secret of API namespace ns, or nil
// when o has none.
func MakePullSecret(ns string, o Options) *corev1.Secret {
	if len(o.ImagePullSecret) == 0 {
		return nil
	}
	return &corev1.Secret{
		TypeMeta: kindSecret,
		ObjectMeta: metav1.ObjectMeta{
			Name: names.ImagePullSecret, Namespace: names.Namespace(ns),
			Labels: map[string]string{names.ManagedByLabel: names.ManagedBy},
		},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: o.ImagePullSecret},
	}
}

// MakeEnvSecret returns the Secret that holds t's env, which its pods take
// all of: env values are often credentials, which a Deployment would show
// to everyone who may read it.
func MakeEnvSecret(t *runtime.Target) *corev1.Secret {
	data := make(map[string][]byte, len(t.Env))
	for k, v := range t.Env {
		data[k] = []byte(v)
	}
	return &corev1.Secret{
		TypeMeta:   kindSecret,
		ObjectMeta: objectMeta(t, names.EnvSecret(t.Name)),
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
}

// MakeService returns the Service in front of t's pods.
func MakeService(t *runtime.Target) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   kindService,
		ObjectMeta: objectMeta(t, names.Service(t.Name)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: selector(t.Name),
			Ports: []corev1.ServicePort{{
				Name: portName, Protocol: corev1.ProtocolTCP,
				Port: servicePort, TargetPort: intstr.FromString(portName),
			}},
		},
	}
}

// MakeDeployment returns the Deployment that runs t's pods (see the package
// doc for what they are like).
func MakeDeployment(t *runtime.Target, o Options) *appsv1.Deployment {
	o = o.defaults()
	podLabels := labels(t.Namespace, t.Name)
	var pullSecrets []corev1.LocalObjectReference
	if len(o.ImagePullSecret) > 0 {
		pullSecrets = []corev1.LocalObjectReference{{Name: names.ImagePullSecret}}
	}
	var runtimeClass *string
	if o.RuntimeClassName != "" {
		runtimeClass = ptr.To(o.RuntimeClassName)
	}
	memory := *resource.NewQuantity(int64(t.MemoryMB)<<20, resource.BinarySI)
	return &appsv1.Deployment{
		TypeMeta:   kindDeployment,
		ObjectMeta: objectMeta(t, names.Deployment(t.Name)),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas(t)),
			Selector: &metav1.LabelSelector{MatchLabels: selector(t.Name)},
			// Enough to roll back by hand; sless itself never does.
			RevisionHistoryLimit: ptr.To[int32](2),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      podLabels,
					Annotations: map[string]string{AnnotationVersion: t.Version},
				},
				Spec: corev1.PodSpec{
					RuntimeClassName:             runtimeClass,
					ImagePullSecrets:             pullSecrets,
					AutomountServiceAccountToken: ptr.To(false),
					// The env is the function's and the platform's, as in
					// the embedded mode: no variables for every Service of
					// the namespace.
					EnableServiceLinks: ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To[int64](imageUID),
						RunAsGroup:     ptr.To[int64](imageGID),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:            containerName,
						Image:           t.Artifact,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Ports: []corev1.ContainerPort{{
							Name: portName, ContainerPort: runtime.ImagePort, Protocol: corev1.ProtocolTCP,
						}},
						EnvFrom: []corev1.EnvFromSource{{
							SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: names.EnvSecret(t.Name)}},
						}},
						Env: platformEnv(t),
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceMemory: memory},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: memory},
						},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
								Path: runtime.ImageHealthPath, Port: intstr.FromString(portName),
							}},
							// The wrapper listens once the handler is
							// loaded: a new pod serves within a second of it.
							PeriodSeconds: 1, FailureThreshold: 3, SuccessThreshold: 1, TimeoutSeconds: 1,
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							RunAsNonRoot:             ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: tmpVolume, MountPath: "/tmp"}},
					}},
					Volumes: []corev1.Volume{{
						Name: tmpVolume,
						VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
							Medium:    corev1.StorageMediumMemory,
							SizeLimit: resource.NewQuantity(int64(o.TmpMB)<<20, resource.BinarySI),
						}},
					}},
				},
			},
		},
	}
}

// replicas is how many pods t runs: none while suspended, else
// MinInstances, and at least one, because nothing in the cluster mode
// starts a pod for an invocation yet; once it scales from zero, a function
// with MinInstances 0 will get none until invoked.
func replicas(t *runtime.Target) int32 {
	if t.Suspended {
		return 0
	}
	return int32(max(t.MinInstances, 1))
}

// platformEnv is what the platform sets in a pod, over the function's env
// (a container's env wins over its envFrom): what the wrapper's --code-dir
// mode reads, and HOME and TMPDIR in the writable /tmp, as the embedded
// mode's sandbox sets them, unless the function sets them itself.
func platformEnv(t *runtime.Target) []corev1.EnvVar {
	var env []corev1.EnvVar
	for _, k := range []string{"HOME", "TMPDIR"} {
		if _, ok := t.Env[k]; !ok {
			env = append(env, corev1.EnvVar{Name: k, Value: "/tmp"})
		}
	}
	return append(env,
		corev1.EnvVar{Name: "SLESS_FUNCTION", Value: t.Name},
		corev1.EnvVar{Name: "SLESS_NAMESPACE", Value: t.Namespace},
		corev1.EnvVar{Name: "SLESS_CONCURRENCY", Value: strconv.Itoa(max(t.Concurrency, 1))},
		// So that `kubectl logs` shows what handlers print.
		corev1.EnvVar{Name: "SLESS_ECHO_LOGS", Value: "1"},
	)
}

// MakeNetworkPolicy returns the NetworkPolicy of t's pods: they admit
// connections to the wrapper's port from sless's pods (o.ControlPlane) and
// from nothing else; with public egress, they may connect to the cluster's
// DNS (o.DNS) on port 53 and to public addresses only: never to
// runtime.DeniedPrefixes, nor to an IPv6 range that routes to an embedded
// IPv4 address (a NetworkPolicy cannot look into the embedded address, so
// the whole range is denied), which also keeps them from other pods and
// Services on private addresses.
func MakeNetworkPolicy(t *runtime.Target, o Options) *networkingv1.NetworkPolicy {
	o = o.defaults()
	np := &networkingv1.NetworkPolicy{
		TypeMeta:   kindNetworkPolicy,
		ObjectMeta: objectMeta(t, names.NetworkPolicy(t.Name)),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selector(t.Name)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{peer(o.ControlPlane)},
				Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolTCP, runtime.ImagePort)},
			}},
		},
	}
	if t.Egress == runtime.EgressPublic {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		v4 := &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}
		v6 := &networkingv1.IPBlock{CIDR: "::/0", Except: slices.Clone(embeddingPrefixes)}
		for _, p := range runtime.DeniedPrefixes {
			if p.Addr().Is4() {
				v4.Except = append(v4.Except, p.String())
			} else {
				v6.Except = append(v6.Except, p.String())
			}
		}
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{
			{
				To:    []networkingv1.NetworkPolicyPeer{peer(o.DNS)},
				Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolUDP, 53), port(corev1.ProtocolTCP, 53)},
			},
			{To: []networkingv1.NetworkPolicyPeer{{IPBlock: v4}, {IPBlock: v6}}},
		}
	}
	return np
}

// embeddingPrefixes are the IPv6 ranges that carry an IPv4 address that
// packets reach: NAT64 and 6to4. (An IPv4-mapped address is a socket's way
// to name an IPv4 address: its packets are IPv4, which the IPv4 block
// judges.)
var embeddingPrefixes = []string{"64:ff9b::/96", "2002::/16"}

// peer selects p's pods.
func peer(p Peer) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: p.Namespace}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: maps.Clone(p.Labels)},
	}
}

// port is port n of proto.
func port(proto corev1.Protocol, n int) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(proto), Port: ptr.To(intstr.FromInt(n))}
}

// objectMeta is the metadata of t's object named name.
func objectMeta(t *runtime.Target, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: names.Namespace(t.Namespace), Labels: labels(t.Namespace, t.Name)}
}
