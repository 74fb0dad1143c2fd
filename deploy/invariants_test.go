package deploy

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/kube"
)

// The sless Deployment, as the base names it, and the namespace of kaniko
// builds, the default of --kaniko-namespace (TestFlagsExist checks it).
const (
	slessNamespace  = "sless"
	slessDeployment = "sless"
	slessContainer  = "sless"
	kanikoNamespace = "sless-builds"
)

// podTemplate is the pod template of a workload.
type podTemplate struct {
	// owner names the workload: "Deployment sless/sless".
	owner     string
	namespace string
	template  corev1.PodTemplateSpec
	// claims are the names of a StatefulSet's volume claim templates, which
	// its pods have as volumes.
	claims []string
}

// podTemplates returns the pod templates of r's workloads.
func podTemplates(t *testing.T, r rendered) []podTemplate {
	t.Helper()
	var out []podTemplate
	for _, o := range r.objs {
		owner := o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
		pt := podTemplate{owner: owner, namespace: o.GetNamespace()}
		switch o.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			convert(t, o, &d)
			pt.template = d.Spec.Template
		case "StatefulSet":
			var s appsv1.StatefulSet
			convert(t, o, &s)
			pt.template = s.Spec.Template
			for _, c := range s.Spec.VolumeClaimTemplates {
				pt.claims = append(pt.claims, c.Name)
			}
		case "DaemonSet":
			var d appsv1.DaemonSet
			convert(t, o, &d)
			pt.template = d.Spec.Template
		case "Job":
			var j batchv1.Job
			convert(t, o, &j)
			pt.template = j.Spec.Template
		case "CronJob":
			var j batchv1.CronJob
			convert(t, o, &j)
			pt.template = j.Spec.JobTemplate.Spec.Template
		case "Pod", "ReplicaSet", "ReplicationController":
			t.Errorf("%s: %s: install a Deployment or a StatefulSet instead", r.name, owner)
			continue
		default:
			continue
		}
		out = append(out, pt)
	}
	return out
}

// convert fills typed from the unstructured object o, refusing fields the
// type does not have (a misspelt field would otherwise vanish unnoticed).
func convert(t *testing.T, o *unstructured.Unstructured, typed any) {
	t.Helper()
	if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, typed, true); err != nil {
		t.Fatalf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
}

// TestEveryContainerIsLockedDown: every container of every workload runs a
// versioned image as a non-root user on a read-only root filesystem,
// without privilege escalation or capabilities, with the runtime's seccomp
// profile, and states the CPU and memory it requests and the memory it may
// use.
func TestEveryContainerIsLockedDown(t *testing.T) {
	for _, r := range renderAll(t) {
		templates := podTemplates(t, r)
		if len(templates) == 0 {
			t.Errorf("%s: no workloads", r.name)
		}
		for _, pt := range templates {
			spec := pt.template.Spec
			for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
				where := fmt.Sprintf("%s: %s, container %s", r.name, pt.owner, c.Name)
				for _, problem := range containerProblems(&spec, c) {
					t.Errorf("%s: %s", where, problem)
				}
			}
		}
	}
}

// containerProblems lists what c of pod spec lacks of the rules of
// TestEveryContainerIsLockedDown.
func containerProblems(spec *corev1.PodSpec, c corev1.Container) []string {
	var problems []string
	if err := checkImage(c.Image); err != nil {
		problems = append(problems, "image: "+err.Error())
	}
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	nonRoot := psc.RunAsNonRoot
	if sc.RunAsNonRoot != nil {
		nonRoot = sc.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		problems = append(problems, "runAsNonRoot is not true")
	}
	uid := psc.RunAsUser
	if sc.RunAsUser != nil {
		uid = sc.RunAsUser
	}
	if uid != nil && *uid == 0 {
		problems = append(problems, "runs as uid 0")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		problems = append(problems, "readOnlyRootFilesystem is not true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		problems = append(problems, "allowPrivilegeEscalation is not false")
	}
	if sc.Privileged != nil && *sc.Privileged {
		problems = append(problems, "privileged")
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		problems = append(problems, "capabilities: ALL is not dropped")
	} else if len(sc.Capabilities.Add) > 0 {
		problems = append(problems, fmt.Sprintf("capabilities: adds %v", sc.Capabilities.Add))
	}
	seccomp := psc.SeccompProfile
	if sc.SeccompProfile != nil {
		seccomp = sc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		problems = append(problems, "seccomp profile is not RuntimeDefault")
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := c.Resources.Requests[res]; !ok || q.IsZero() {
			problems = append(problems, fmt.Sprintf("no %s request", res))
		}
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok || q.IsZero() {
		problems = append(problems, "no memory limit")
	}
	return problems
}

// TestContainerProblems: the rules of TestEveryContainerIsLockedDown find
// what they look for.
func TestContainerProblems(t *testing.T) {
	good := func() (*corev1.PodSpec, corev1.Container) {
		spec := &corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot: new(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}}
		c := corev1.Container{Image: "sless:v1.2.3",
			SecurityContext: &corev1.SecurityContext{ReadOnlyRootFilesystem: new(true), AllowPrivilegeEscalation: new(false),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}}}
		return spec, c
	}
	if spec, c := good(); len(containerProblems(spec, c)) != 0 {
		t.Fatalf("a locked-down container: %v; want no problems", containerProblems(spec, c))
	}
	for _, tc := range []struct {
		what   string
		change func(*corev1.PodSpec, *corev1.Container)
		want   string
	}{
		{"latest", func(_ *corev1.PodSpec, c *corev1.Container) { c.Image = "sless:latest" }, "image"},
		{"root", func(_ *corev1.PodSpec, c *corev1.Container) { c.SecurityContext.RunAsUser = new(int64(0)) }, "uid 0"},
		{"root allowed", func(_ *corev1.PodSpec, c *corev1.Container) { c.SecurityContext.RunAsNonRoot = new(false) }, "runAsNonRoot"},
		{"writable root", func(_ *corev1.PodSpec, c *corev1.Container) { c.SecurityContext.ReadOnlyRootFilesystem = nil }, "readOnlyRootFilesystem"},
		{"escalation", func(_ *corev1.PodSpec, c *corev1.Container) { c.SecurityContext.AllowPrivilegeEscalation = new(true) }, "allowPrivilegeEscalation"},
		{"capability", func(_ *corev1.PodSpec, c *corev1.Container) {
			c.SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}, "adds"},
		{"unconfined", func(s *corev1.PodSpec, _ *corev1.Container) { s.SecurityContext.SeccompProfile = nil }, "seccomp"},
		{"no memory limit", func(_ *corev1.PodSpec, c *corev1.Container) { c.Resources.Limits = nil }, "memory limit"},
		{"no cpu request", func(_ *corev1.PodSpec, c *corev1.Container) { delete(c.Resources.Requests, corev1.ResourceCPU) }, "cpu request"},
	} {
		spec, c := good()
		tc.change(spec, &c)
		got := strings.Join(containerProblems(spec, c), "; ")
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: problems %q; want one about %q", tc.what, got, tc.want)
		}
	}
}

// slessPods returns the sless Deployment of r and its pod template.
func slessPods(t *testing.T, r rendered) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	o := r.find("Deployment", slessNamespace, slessDeployment)
	if o == nil {
		t.Fatalf("%s: no Deployment %s/%s", r.name, slessNamespace, slessDeployment)
	}
	var d appsv1.Deployment
	convert(t, o, &d)
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == slessContainer {
			return &d, c
		}
	}
	t.Fatalf("%s: the Deployment has no container %s", r.name, slessContainer)
	return nil, nil
}

// TestFunctionsAdmitTheControlPlane: the NetworkPolicy the executor gives
// every function (with its default settings) admits the pods of the sless
// Deployment, and so does every NetworkPolicy of the install in front of
// what sless connects to; the Service and the PodDisruptionBudget select
// them.
func TestFunctionsAdmitTheControlPlane(t *testing.T) {
	fnPolicy := kube.MakeNetworkPolicy(&runtime.Target{Namespace: "team-a", Name: "hello"}, kube.Options{})
	for _, r := range renderAll(t) {
		d, _ := slessPods(t, r)
		podLabels := labels.Set(d.Spec.Template.Labels)
		ns := r.find("Namespace", "", slessNamespace)
		if ns == nil {
			t.Fatalf("%s: no Namespace %s", r.name, slessNamespace)
		}
		// The API server labels every namespace with its name.
		nsLabels := labels.Set(maps.Clone(ns.GetLabels()))
		nsLabels[corev1.LabelMetadataName] = ns.GetName()

		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || !sel.Matches(podLabels) {
			t.Errorf("%s: the Deployment's selector %v does not select its pods (%v)", r.name, d.Spec.Selector, err)
		}
		if !admits(t, fnPolicy.Spec.Ingress, nsLabels, podLabels) {
			t.Errorf("%s: a function's NetworkPolicy (ingress %+v) does not admit the sless pods (labels %v in namespace %v)",
				r.name, fnPolicy.Spec.Ingress, podLabels, nsLabels)
		}
		for _, o := range r.ofKind("NetworkPolicy") {
			var np networkingv1.NetworkPolicy
			convert(t, o, &np)
			if np.Namespace == slessNamespace && !admits(t, np.Spec.Ingress, nsLabels, podLabels) {
				t.Errorf("%s: NetworkPolicy %s does not admit the sless pods", r.name, np.Name)
			}
		}
		if r.ofKind("PodDisruptionBudget") == nil {
			t.Errorf("%s: no PodDisruptionBudget", r.name)
		}
		for _, o := range r.ofKind("PodDisruptionBudget") {
			var pdb policyv1.PodDisruptionBudget
			convert(t, o, &pdb)
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil || !sel.Matches(podLabels) {
				t.Errorf("%s: PodDisruptionBudget %s does not select the sless pods", r.name, pdb.Name)
			}
			if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() >= int(*d.Spec.Replicas) {
				t.Errorf("%s: PodDisruptionBudget %s: minAvailable %v of %d replicas; want fewer, so that a node can drain",
					r.name, pdb.Name, pdb.Spec.MinAvailable, *d.Spec.Replicas)
			}
		}
		svc := r.find("Service", slessNamespace, "sless")
		if svc == nil {
			t.Fatalf("%s: no Service sless", r.name)
		}
		var s corev1.Service
		convert(t, svc, &s)
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) || len(s.Spec.Selector) == 0 {
			t.Errorf("%s: the Service's selector %v does not select the sless pods", r.name, s.Spec.Selector)
		}
	}
}

// admits reports whether one of rules admits a pod with podLabels in a
// namespace with nsLabels, on some port.
func admits(t *testing.T, rules []networkingv1.NetworkPolicyIngressRule, nsLabels, podLabels labels.Set) bool {
	t.Helper()
	matches := func(s *metav1.LabelSelector, set labels.Set) bool {
		if s == nil {
			return true
		}
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			t.Fatalf("selector %v: %v", s, err)
		}
		return sel.Matches(set)
	}
	for _, rule := range rules {
		for _, from := range rule.From {
			if from.IPBlock != nil {
				continue
			}
			// A peer without a namespace selector means the policy's own
			// namespace, which is sless's for the install's policies.
			if matches(from.NamespaceSelector, nsLabels) && matches(from.PodSelector, podLabels) {
				return true
			}
		}
	}
	return false
}

// TestSlessDeployment: the control plane runs two replicas (leader
// election picks the one that reconciles) with health and readiness
// probes on the server's port, writes only to its mounted volumes, and
// runs as the ServiceAccount that the RBAC binds.
func TestSlessDeployment(t *testing.T) {
	for _, r := range renderAll(t) {
		d, c := slessPods(t, r)
		spec := d.Spec.Template.Spec
		if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
			t.Errorf("%s: replicas %v; want at least 2", r.name, d.Spec.Replicas)
		}
		if len(c.Args) == 0 || c.Args[0] != "server" {
			t.Errorf("%s: args %q; want `server ...`", r.name, c.Args)
		}
		if got := flagValue(c.Args, "mode"); got != "kubernetes" {
			t.Errorf("%s: --mode %q; want kubernetes", r.name, got)
		}
		listen := flagValue(c.Args, "listen")
		if !strings.HasPrefix(listen, "0.0.0.0:") {
			t.Errorf("%s: --listen %q; want 0.0.0.0:PORT, reachable from the Service and other pods", r.name, listen)
		}
		var port *corev1.ContainerPort
		for i := range c.Ports {
			if c.Ports[i].Name == "http" {
				port = &c.Ports[i]
			}
		}
		if port == nil || fmt.Sprint(port.ContainerPort) != strings.TrimPrefix(listen, "0.0.0.0:") {
			t.Errorf("%s: container port http %+v; want the port of --listen %s", r.name, port, listen)
		}
		for _, p := range []struct {
			what  string
			probe *corev1.Probe
			path  string
		}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
			if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "http" {
				t.Errorf("%s: %s probe %+v; want GET %s on port http", r.name, p.what, p.probe, p.path)
			}
		}
		// The root filesystem is read-only: what the server writes must be
		// a mounted volume, what it reads from a file a mounted one.
		mounts := map[string]corev1.VolumeMount{}
		for _, m := range c.VolumeMounts {
			mounts[m.MountPath] = m
		}
		dataDir := flagValue(c.Args, "data-dir")
		if dataDir == "" {
			t.Errorf("%s: no --data-dir: the default is under HOME, on the read-only root filesystem", r.name)
		}
		for _, dir := range []string{dataDir, "/tmp"} {
			m, ok := mounts[dir]
			if !ok || m.ReadOnly || !isEmptyDir(spec, m.Name) {
				t.Errorf("%s: %s is not a writable emptyDir volume of the pod (mounts %v)", r.name, dir, c.VolumeMounts)
			}
		}
		checkConfigMount(t, r, spec, c)

		sa := spec.ServiceAccountName
		if sa == "" || r.find("ServiceAccount", slessNamespace, sa) == nil {
			t.Errorf("%s: service account %q is not in the install", r.name, sa)
		}
		if !bound(t, r, "ClusterRoleBinding", slessNamespace, sa) || !bound(t, r, "RoleBinding", slessNamespace, sa) {
			t.Errorf("%s: service account %q lacks a ClusterRoleBinding or a RoleBinding of the install", r.name, sa)
		}
	}
}

// checkConfigMount: --config names the config.yaml of the ConfigMap
// sless-config, mounted in the container.
func checkConfigMount(t *testing.T, r rendered, spec corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	cfg := flagValue(c.Args, "config")
	for _, m := range c.VolumeMounts {
		if m.MountPath != path.Dir(cfg) {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			cm := r.find("ConfigMap", slessNamespace, v.ConfigMap.Name)
			if cm == nil {
				t.Fatalf("%s: ConfigMap %s of --config is not in the install", r.name, v.ConfigMap.Name)
			}
			if _, ok, _ := unstructured.NestedString(cm.Object, "data", path.Base(cfg)); !ok {
				t.Errorf("%s: ConfigMap %s has no %s", r.name, cm.GetName(), path.Base(cfg))
			}
			return
		}
	}
	t.Errorf("%s: --config %q is not a file of a mounted ConfigMap", r.name, cfg)
}

// bound reports whether a binding of kind in r binds the service account
// namespace/name to a role that r has.
func bound(t *testing.T, r rendered, kind, namespace, name string) bool {
	t.Helper()
	for _, o := range r.ofKind(kind) {
		var b rbacv1.RoleBinding // a ClusterRoleBinding has the same fields
		convert(t, o, &b)
		roleNS := o.GetNamespace()
		if b.RoleRef.Kind == "ClusterRole" {
			roleNS = ""
		}
		if r.find(b.RoleRef.Kind, roleNS, b.RoleRef.Name) == nil {
			continue
		}
		for _, s := range b.Subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Namespace == namespace && s.Name == name {
				return true
			}
		}
	}
	return false
}

// isEmptyDir reports whether spec's volume name is an emptyDir.
func isEmptyDir(spec corev1.PodSpec, name string) bool {
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v.EmptyDir != nil
		}
	}
	return false
}

// flagValue returns the value of --name in args (--name VALUE or
// --name=VALUE), or "".
func flagValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// TestReferencesResolve: every Secret and ConfigMap that a workload reads
// (env, volumes) is in the install with the keys it reads, unless it is
// marked optional; kustomize renames generated ones, so this also checks
// that the names were rewritten.
func TestReferencesResolve(t *testing.T) {
	for _, r := range renderAll(t) {
		has := func(kind, ns, name, key string) bool {
			o := r.find(kind, ns, name)
			if o == nil {
				return false
			}
			if key == "" {
				return true
			}
			_, ok := o.Object["data"].(map[string]any)[key]
			return ok
		}
		for _, pt := range podTemplates(t, r) {
			spec := pt.template.Spec
			for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
				for _, e := range c.Env {
					if e.ValueFrom == nil {
						continue
					}
					if ref := e.ValueFrom.SecretKeyRef; ref != nil && !optional(ref.Optional) && !has("Secret", pt.namespace, ref.Name, ref.Key) {
						t.Errorf("%s: %s: env %s: Secret %s with key %s is not in the install", r.name, pt.owner, e.Name, ref.Name, ref.Key)
					}
					if ref := e.ValueFrom.ConfigMapKeyRef; ref != nil && !optional(ref.Optional) && !has("ConfigMap", pt.namespace, ref.Name, ref.Key) {
						t.Errorf("%s: %s: env %s: ConfigMap %s with key %s is not in the install", r.name, pt.owner, e.Name, ref.Name, ref.Key)
					}
				}
				for _, e := range c.EnvFrom {
					if ref := e.SecretRef; ref != nil && !optional(ref.Optional) && !has("Secret", pt.namespace, ref.Name, "") {
						t.Errorf("%s: %s: envFrom: Secret %s is not in the install", r.name, pt.owner, ref.Name)
					}
					if ref := e.ConfigMapRef; ref != nil && !optional(ref.Optional) && !has("ConfigMap", pt.namespace, ref.Name, "") {
						t.Errorf("%s: %s: envFrom: ConfigMap %s is not in the install", r.name, pt.owner, ref.Name)
					}
				}
				for _, m := range c.VolumeMounts {
					if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) && !slices.Contains(pt.claims, m.Name) {
						t.Errorf("%s: %s: container %s mounts volume %s, which the pod does not have", r.name, pt.owner, c.Name, m.Name)
					}
				}
			}
			for _, v := range spec.Volumes {
				if s := v.Secret; s != nil && !optional(s.Optional) && !has("Secret", pt.namespace, s.SecretName, "") {
					t.Errorf("%s: %s: volume %s: Secret %s is not in the install", r.name, pt.owner, v.Name, s.SecretName)
				}
				if cm := v.ConfigMap; cm != nil && !optional(cm.Optional) && !has("ConfigMap", pt.namespace, cm.Name, "") {
					t.Errorf("%s: %s: volume %s: ConfigMap %s is not in the install", r.name, pt.owner, v.Name, cm.Name)
				}
			}
		}
	}
}

func optional(b *bool) bool { return b != nil && *b }

// TestObjectsFitClientSideApply: `kubectl apply -k` keeps each object's
// whole configuration in an annotation, and the API server refuses
// annotations over 256 KiB: every object must fit (a grown CRD would
// not; `kubectl apply --server-side` has no such limit).
func TestObjectsFitClientSideApply(t *testing.T) {
	const maxAnnotations = 256 << 10
	for _, r := range renderAll(t) {
		for _, o := range r.objs {
			raw, err := json.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			if len(raw) >= maxAnnotations*9/10 {
				t.Errorf("%s: %s %s is %d bytes; kubectl apply's annotation of it would near the limit of %d",
					r.name, o.GetKind(), o.GetName(), len(raw), maxAnnotations)
			}
		}
	}
}

// TestNamespacesEnforcePodSecurity: the control plane's namespace enforces
// the restricted Pod Security profile; the kaniko builds' namespace, when
// the install has it, baseline (docs/builds.md: kaniko runs as root).
func TestNamespacesEnforcePodSecurity(t *testing.T) {
	want := map[string]string{slessNamespace: "restricted", kanikoNamespace: "baseline"}
	for _, r := range renderAll(t) {
		for _, o := range r.ofKind("Namespace") {
			level, ok := want[o.GetName()]
			if !ok {
				t.Errorf("%s: namespace %s: want only %v", r.name, o.GetName(), slices.Collect(maps.Keys(want)))
				continue
			}
			if got := o.GetLabels()["pod-security.kubernetes.io/enforce"]; got != level {
				t.Errorf("%s: namespace %s enforces Pod Security %q; want %q", r.name, o.GetName(), got, level)
			}
		}
	}
}

// TestEveryObjectIsLabelled: every object of an install says it is part of
// sless, so that one label selector finds them all (the generated Secrets
// and ConfigMap, whose names change, too).
func TestEveryObjectIsLabelled(t *testing.T) {
	for _, r := range renderAll(t) {
		for _, o := range r.objs {
			if got := o.GetLabels()["app.kubernetes.io/part-of"]; got != "sless" {
				t.Errorf("%s: %s %s/%s: label app.kubernetes.io/part-of %q; want sless", r.name, o.GetKind(), o.GetNamespace(), o.GetName(), got)
			}
		}
	}
}
