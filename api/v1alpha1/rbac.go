package v1alpha1

// The rights of the sless server in the cluster mode, cluster-wide, as
// markers from which hack/generate.sh generates the ClusterRole
// deploy/base/rbac/role.yaml. Least privilege: each rule is what the code
// it names does, and no Secret is ever read (the env and image pull Secrets
// are written whole, with server-side apply). The leader election's Lease
// is a Role of the control plane's namespace (leader-election.yaml), the
// kaniko builder's Jobs a Role of the builds' namespace
// (deploy/components/kaniko).
//
// The stores of these resources (internal/kubestore) read and write them,
// their status and, for the finalizer of Functions, their metadata; the
// controllers' informers list and watch them.
//
// +kubebuilder:rbac:groups=sless.kube5s.ru,resources=functions;triggers;functionjobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=sless.kube5s.ru,resources=functions/status;triggers/status;functionjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sless.kube5s.ru,resources=functions/finalizers;triggers/finalizers;functionjobs/finalizers,verbs=update
//
// The stores map a tenant's namespace back to its API namespace (get, list)
// and create it on a first object; the executor (modules/runtime/kube)
// applies its Pod Security labels.
//
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;create;patch
//
// The executor applies a function's Deployment, Service, NetworkPolicy and
// env Secret (and the namespace's image pull Secret) with server-side apply
// and deletes them; the function controller's informer lists and watches
// the Deployments, whose rollout it follows.
//
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services;secrets,verbs=create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=create;patch;delete
//
// The trigger controller applies the Ingress of an http trigger that asks
// for one, in the server's namespace, with server-side apply, and deletes
// it (modules/triggers/trcontroller); it never reads one.
//
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ingresses,verbs=create;patch;delete
//
// The function controller records an Event on a Function at each transition
// of its status (fncontroller).
//
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
