package kaniko

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.kube5s.ru/sless/internal/names"
	"sless.kube5s.ru/sless/modules/build"
)

// Labels and annotations of the build Jobs and their pods. The label keys
// differ from the executor's (sless.kube5s.ru/function), so that a Service
// of a function never selects a pod that builds it, whatever namespace the
// builds run in.
const (
	// LabelNamespace and LabelFunction carry the function's API namespace
	// and name (names.LabelValue of them): the Jobs of a function are
	// listed by them.
	LabelNamespace = "sless.kube5s.ru/build-namespace"
	LabelFunction  = "sless.kube5s.ru/build-function"
	// LabelKey carries the build key, shortened to fit a label value
	// (names.LabelValue); AnnotationKey has it whole.
	LabelKey      = "sless.kube5s.ru/build-key"
	AnnotationKey = "sless.kube5s.ru/build-key"
	// AnnotationImage is the image the Job pushes, REPOSITORY:TAG; its
	// artifact is the repository pinned to the digest the Job reports.
	AnnotationImage = "sless.kube5s.ru/image"
	// AnnotationContext is the key of the Job's build context in S3
	// (Contexts), removed once the Job ended.
	AnnotationContext = "sless.kube5s.ru/context"
	// LabelComponent, with the value Component, and names.ManagedByLabel
	// mark every build Job and pod.
	LabelComponent = "app.kubernetes.io/component"
	Component      = "build"
)

// The containers of a build pod and what they share.
const (
	// fetchContainer downloads the build context into the workspace.
	fetchContainer = "fetch-context"
	// kanikoContainer builds and pushes the image.
	kanikoContainer = "kaniko"
	workspaceDir    = "/workspace"
	contextFile     = workspaceDir + "/context.tar.gz"
	// fetchUser runs the download: not root, owning nothing in its image.
	fetchUser = 65532
	// jobTTL is how long a finished Job whose result nobody read (its
	// server was stopped meanwhile) stays: the builder deletes the others
	// once it has read them.
	jobTTL = time.Hour
)

// kanikoCapabilities are what kaniko needs of root's capabilities to unpack
// the base image over its own filesystem (owners, modes, file capabilities)
// and run the install step; all of them are in the "baseline" Pod Security
// profile.
var kanikoCapabilities = []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETFCAP", "SETGID", "SETUID"}

// BuildJob is what differs between the Jobs of one builder.
type BuildJob struct {
	// Name is the Job's name (jobName).
	Name string
	// Request is the build's, with its Handler set.
	Request build.Request
	// Image is the image the Job pushes, REPOSITORY:TAG.
	Image string
	// ContextKey is the build context's key in S3, and ContextURL a URL
	// that downloads it without credentials; ContextBytes is its size.
	ContextKey, ContextURL string
	ContextBytes           int64
}

// MakeBuildJob is the Job that builds j in c's namespace (c with its
// defaults): an init container downloads the build context with curl from
// j.ContextURL into an emptyDir, then kaniko builds it and pushes j.Image,
// writing the image's digest to its termination message. A failed
// container's termination message is the end of its log instead
// (FallbackToLogsOnError). The Job runs once (no retries: a build that
// failed fails again), for at most c.Timeout, on a node of c.Platform, and
// is removed an hour after it finished unless the builder removed it
// before.
//
// The pod meets the "baseline" Pod Security profile, not "restricted":
// kaniko runs as root with a writable root filesystem, since it unpacks
// the base image over its own filesystem, and keeps the capabilities that
// needs (kanikoCapabilities). It gets no service-account token, no
// privilege escalation and the runtime's default seccomp profile; the
// download runs as a user with nothing but a writable workspace.
func MakeBuildJob(c Config, j BuildJob) *batchv1.Job {
	labels := map[string]string{
		names.ManagedByLabel: names.ManagedBy,
		LabelComponent:       Component,
		LabelNamespace:       names.LabelValue(j.Request.Namespace),
		LabelFunction:        names.LabelValue(j.Request.Function),
		LabelKey:             names.LabelValue(j.Request.Key()),
	}
	os, arch, _ := strings.Cut(c.Platform, "/")
	args := []string{
		"--context=tar://" + contextFile,
		"--dockerfile=Dockerfile",
		"--destination=" + j.Image,
		"--digest-file=" + corev1.TerminationMessagePathDefault,
		"--custom-platform=" + c.Platform,
		"--push-retry=2",
		// Plain text: the end of the log is the failure message users see.
		"--log-format=text",
	}
	if c.Insecure {
		args = append(args, "--insecure", "--insecure-pull")
	}
	kaniko := corev1.Container{
		Name:  kanikoContainer,
		Image: c.Image,
		Args:  args,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: c.cpu, corev1.ResourceMemory: c.memory},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: c.memory},
		},
		VolumeMounts:             []corev1.VolumeMount{{Name: "workspace", MountPath: workspaceDir, ReadOnly: true}},
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                new(int64(0)),
			RunAsNonRoot:             new(false),
			AllowPrivilegeEscalation: new(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: kanikoCapabilities},
		},
	}
	volumes := []corev1.Volume{{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		SizeLimit: new(workspaceSize(j.ContextBytes)),
	}}}}
	if c.RegistrySecret != "" {
		// Where kaniko reads the registries' credentials
		// (DOCKER_CONFIG=/kaniko/.docker).
		kaniko.VolumeMounts = append(kaniko.VolumeMounts, corev1.VolumeMount{Name: "registry", MountPath: "/kaniko/.docker", ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "registry", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: c.RegistrySecret,
			Items:      []corev1.KeyToPath{{Key: corev1.DockerConfigJsonKey, Path: "config.json"}},
		}}})
	}
	fetch := corev1.Container{
		Name:  fetchContainer,
		Image: c.FetchImage,
		// curl from the PATH, whatever the image's entrypoint.
		Command: []string{"curl"},
		Args:    []string{"--fail", "--silent", "--show-error", "--retry", "3", "--output", contextFile, j.ContextURL},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		VolumeMounts:             []corev1.VolumeMount{{Name: "workspace", MountPath: workspaceDir}},
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                new(int64(fetchUser)),
			RunAsGroup:               new(int64(fetchUser)),
			RunAsNonRoot:             new(true),
			ReadOnlyRootFilesystem:   new(true),
			AllowPrivilegeEscalation: new(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	return &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      j.Name,
			Namespace: c.Namespace,
			Labels:    labels,
			Annotations: map[string]string{
				AnnotationKey:     j.Request.Key(),
				AnnotationImage:   j.Image,
				AnnotationContext: j.ContextKey,
			},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:            new(int32(0)),
			ActiveDeadlineSeconds:   new(int64(math.Ceil(c.Timeout.Seconds()))),
			TTLSecondsAfterFinished: new(int32(jobTTL.Seconds())),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: new(false),
					EnableServiceLinks:           new(false),
					NodeSelector:                 map[string]string{corev1.LabelOSStable: os, corev1.LabelArchStable: arch},
					SecurityContext: &corev1.PodSecurityContext{
						// The download's user writes the workspace.
						FSGroup:        new(int64(fetchUser)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					InitContainers: []corev1.Container{fetch},
					Containers:     []corev1.Container{kaniko},
					Volumes:        volumes,
				},
			},
		},
	}
}

// workspaceSize bounds the emptyDir of a context of n bytes: the context
// and a margin for the file system.
func workspaceSize(n int64) resource.Quantity {
	const mib = 1 << 20
	return *resource.NewQuantity((n/mib+2)*mib, resource.BinarySI)
}

// jobName is the name of the Job of req: per function (in any API
// namespace, since the Jobs of every namespace share one) and build key.
func jobName(req build.Request) string {
	return names.BuildJob(req.Function, req.Namespace+"/"+req.Key())
}

// functionLabels select the Jobs of a function.
func functionLabels(namespace, function string) map[string]string {
	return map[string]string{LabelNamespace: names.LabelValue(namespace), LabelFunction: names.LabelValue(function)}
}

// digestRE is what kaniko writes to its digest file.
var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// state is what a build Job and its pods say about the build.
type state struct {
	// done reports that the Job ended, with result or err.
	done   bool
	result build.Result
	err    error
	// timedOut reports that Kubernetes stopped the Job at its deadline.
	timedOut bool
	// started reports that kaniko started, so that a timeout is the
	// build's, not the cluster's.
	started bool
	// waiting says why a container of the pod waits to start, when it
	// does for another reason than its turn ("ImagePullBackOff: ...").
	waiting string
}

// jobState reads the state of job from it and its pods. depFile names the
// runtime's dependency file for the messages of a failed install.
func jobState(job *batchv1.Job, pods []corev1.Pod, depFile string) state {
	pod := newestPod(pods)
	var st state
	if pod != nil {
		st.started, st.waiting = podProgress(pod)
	}
	switch {
	case condition(job, batchv1.JobComplete):
		st.done = true
		st.result, st.err = succeeded(job, pod)
	case condition(job, batchv1.JobFailed):
		if c := findCondition(job, batchv1.JobFailed); c.Reason == batchv1.JobReasonDeadlineExceeded {
			st.timedOut = true
			return st
		}
		st.done = true
		st.err = failed(job, pod, depFile)
	}
	return st
}

// succeeded is the result of a Job that completed: the image digest in
// kaniko's termination message.
func succeeded(job *batchv1.Job, pod *corev1.Pod) (build.Result, error) {
	term := terminated(pod, kanikoContainer, false)
	if term == nil {
		return build.Result{}, fmt.Errorf("build Job %s completed, but the state of its pod, which holds the image digest, is gone", job.Name)
	}
	digest := strings.TrimSpace(term.Message)
	if !digestRE.MatchString(digest) {
		return build.Result{}, fmt.Errorf("build Job %s completed without an image digest in its termination message: %q", job.Name, digest)
	}
	image, err := name.NewTag(job.Annotations[AnnotationImage])
	if err != nil {
		return build.Result{}, fmt.Errorf("build Job %s: annotation %s: %w", job.Name, AnnotationImage, err)
	}
	return build.Result{Artifact: image.Context().Digest(digest).String()}, nil
}

// failed is why a Job failed: a *build.Error when the install step
// failed or ran out of memory (the code's dependencies are at fault),
// another error for anything else (the download of the context, the
// registry, the cluster).
func failed(job *batchv1.Job, pod *corev1.Pod, depFile string) error {
	c := findCondition(job, batchv1.JobFailed)
	if pod == nil {
		return fmt.Errorf("build Job %s failed (%s: %s) and its pod is gone", job.Name, c.Reason, c.Message)
	}
	if term := terminated(pod, fetchContainer, true); term != nil && term.ExitCode != 0 {
		return fmt.Errorf("build Job %s could not download its build context: %s", job.Name, strings.TrimSpace(term.Message))
	}
	term := terminated(pod, kanikoContainer, false)
	switch {
	case term == nil:
		return fmt.Errorf("build Job %s failed (%s: %s) before kaniko ran (pod %s: %s: %s)",
			job.Name, c.Reason, c.Message, pod.Name, pod.Status.Reason, pod.Status.Message)
	case term.Reason == "OOMKilled":
		return &build.Error{Msg: "the image build ran out of memory while installing dependencies from " + depFile,
			Log: tail(term.Message)}
	case strings.Contains(term.Message, "failed to execute command"):
		// kaniko's words for a RUN step that failed, and the Dockerfile's
		// only RUN step is the install.
		return &build.Error{Msg: "installing dependencies from " + depFile + " failed (the build log has the end of the output)",
			Log: tail(term.Message)}
	}
	return fmt.Errorf("build Job %s failed: kaniko exited with code %d: %s", job.Name, term.ExitCode, strings.TrimSpace(term.Message))
}

// podProgress reports whether kaniko started in pod and why a container
// waits to start, if it waits for more than its turn.
func podProgress(pod *corev1.Pod) (started bool, waiting string) {
	for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if cs.Name == kanikoContainer && (cs.State.Running != nil || cs.State.Terminated != nil) {
			started = true
		}
		if w := cs.State.Waiting; w != nil && w.Reason != "PodInitializing" && w.Reason != "ContainerCreating" && waiting == "" {
			waiting = fmt.Sprintf("container %s: %s: %s", cs.Name, w.Reason, w.Message)
		}
	}
	return started, waiting
}

// terminated is the terminated state of pod's container name, or nil.
func terminated(pod *corev1.Pod, name string, init bool) *corev1.ContainerStateTerminated {
	if pod == nil {
		return nil
	}
	statuses := pod.Status.ContainerStatuses
	if init {
		statuses = pod.Status.InitContainerStatuses
	}
	for _, cs := range statuses {
		if cs.Name == name {
			return cs.State.Terminated
		}
	}
	return nil
}

// newestPod is the pod created last, or nil.
func newestPod(pods []corev1.Pod) *corev1.Pod {
	var newest *corev1.Pod
	for i := range pods {
		if newest == nil || newest.CreationTimestamp.Before(&pods[i].CreationTimestamp) {
			newest = &pods[i]
		}
	}
	return newest
}

func condition(job *batchv1.Job, t batchv1.JobConditionType) bool {
	return findCondition(job, t).Status == corev1.ConditionTrue
}

func findCondition(job *batchv1.Job, t batchv1.JobConditionType) batchv1.JobCondition {
	for _, c := range job.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return batchv1.JobCondition{}
}

// tail is the end of a termination message as a build log.
func tail(msg string) string {
	if len(msg) > build.LogLimit {
		msg = msg[len(msg)-build.LogLimit:]
	}
	return msg
}
