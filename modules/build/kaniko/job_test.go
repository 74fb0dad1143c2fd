package kaniko

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/kaniko/settings"
)

// testConfig is a valid Config with its defaults.
func testConfig(t *testing.T, change func(*Config)) Config {
	t.Helper()
	c := Config{Namespace: "sless-builds", Repository: "registry.example.com/sless/functions"}
	if change != nil {
		change(&c)
	}
	c, err := c.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var testRequest = build.Request{Namespace: "team-a", Function: "hello", Runtime: "python3.11",
	Handler: "handler.handle", CodeSHA256: codeSHA}

func testBuildJob() BuildJob {
	return BuildJob{Name: jobName(testRequest), Request: testRequest, Image: "registry.example.com/sless/functions:sless-1",
		ContextKey: contextKey(testRequest), ContextURL: "http://s3.example.com/b/kaniko/x?X-Amz-Signature=1", ContextBytes: 3 << 20}
}

// TestMakeBuildJob: the Job runs the download, then kaniko with the
// context, the destination and the digest written where the pod's status
// carries it, once, within the build timeout, on the image platform.
func TestMakeBuildJob(t *testing.T) {
	job := MakeBuildJob(testConfig(t, nil), testBuildJob())
	spec := job.Spec.Template.Spec
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"namespace", job.Namespace, "sless-builds"},
		{"backoff limit", *job.Spec.BackoffLimit, int32(0)},
		{"active deadline", *job.Spec.ActiveDeadlineSeconds, int64(600)},
		{"TTL after finished", *job.Spec.TTLSecondsAfterFinished, int32(3600)},
		{"restart policy", spec.RestartPolicy, corev1.RestartPolicyNever},
		{"service account token", *spec.AutomountServiceAccountToken, false},
		{"node selector", spec.NodeSelector, map[string]string{"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
		{"build key annotation", job.Annotations[AnnotationKey], testRequest.Key()},
		{"image annotation", job.Annotations[AnnotationImage], "registry.example.com/sless/functions:sless-1"},
		{"context annotation", job.Annotations[AnnotationContext], "team-a/hello/" + testRequest.Key() + ".tar.gz"},
		{"function label", job.Labels[LabelFunction], "hello"},
		{"namespace label", job.Labels[LabelNamespace], "team-a"},
		{"pod labels", job.Spec.Template.Labels, job.Labels},
		{"workspace size", spec.Volumes[0].EmptyDir.SizeLimit.String(), "5Mi"},
		{"init containers", len(spec.InitContainers), 1},
		{"containers", len(spec.Containers), 1},
	} {
		if !cmp.Equal(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
	if len(job.Labels[LabelKey]) > 63 {
		t.Errorf("build key label %q is too long for a label", job.Labels[LabelKey])
	}

	fetch, kaniko := spec.InitContainers[0], spec.Containers[0]
	if got := fetch.Args[len(fetch.Args)-1]; got != testBuildJob().ContextURL {
		t.Errorf("the download fetches %q, want the context's URL", got)
	}
	if !slices.Equal(fetch.Command, []string{"curl"}) || !slices.Contains(fetch.Args, "--fail") || !slices.Contains(fetch.Args, contextFile) {
		t.Errorf("download %q %q: want curl --fail with the output %s", fetch.Command, fetch.Args, contextFile)
	}
	wantArgs := []string{"--context=tar:///workspace/context.tar.gz", "--dockerfile=Dockerfile",
		"--destination=registry.example.com/sless/functions:sless-1", "--digest-file=/dev/termination-log",
		"--custom-platform=linux/amd64", "--push-retry=2", "--log-format=text"}
	if diff := cmp.Diff(wantArgs, kaniko.Args); diff != "" {
		t.Errorf("kaniko args (-want +got):\n%s", diff)
	}
	for _, c := range []corev1.Container{fetch, kaniko} {
		if c.TerminationMessagePath != "/dev/termination-log" || c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
			t.Errorf("container %s: termination message %s %s, want /dev/termination-log FallbackToLogsOnError",
				c.Name, c.TerminationMessagePath, c.TerminationMessagePolicy)
		}
		if sc := c.SecurityContext; sc == nil || *sc.AllowPrivilegeEscalation || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container %s: security context %+v; want no privilege escalation and every capability dropped", c.Name, sc)
		}
	}
	if sc := fetch.SecurityContext; !*sc.RunAsNonRoot || *sc.RunAsUser == 0 || !*sc.ReadOnlyRootFilesystem || len(sc.Capabilities.Add) > 0 {
		t.Errorf("download security context %+v: want a read-only non-root user without capabilities", sc)
	}
	if got := kaniko.Resources.Limits.Memory().String(); got != "2Gi" {
		t.Errorf("kaniko memory limit %s, want the default 2Gi", got)
	}
	if slices.ContainsFunc(kaniko.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/kaniko/.docker" }) {
		t.Error("without a registry secret, kaniko has registry credentials mounted")
	}
}

// TestMakeBuildJobSettings: the settings that change the Job.
func TestMakeBuildJobSettings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		check  func(t *testing.T, job *batchv1.Job)
	}{
		{"registry secret", func(c *Config) { c.RegistrySecret = "push-creds" }, func(t *testing.T, job *batchv1.Job) {
			spec := job.Spec.Template.Spec
			i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil })
			if i < 0 || spec.Volumes[i].Secret.SecretName != "push-creds" ||
				!cmp.Equal(spec.Volumes[i].Secret.Items, []corev1.KeyToPath{{Key: ".dockerconfigjson", Path: "config.json"}}) {
				t.Fatalf("volumes %+v: want the secret's .dockerconfigjson as config.json", spec.Volumes)
			}
			if !slices.Contains(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: spec.Volumes[i].Name, MountPath: "/kaniko/.docker", ReadOnly: true}) {
				t.Errorf("kaniko mounts %+v: want the secret at /kaniko/.docker", spec.Containers[0].VolumeMounts)
			}
		}},
		{"insecure registries", func(c *Config) { c.Insecure = true }, func(t *testing.T, job *batchv1.Job) {
			args := job.Spec.Template.Spec.Containers[0].Args
			if !slices.Contains(args, "--insecure") || !slices.Contains(args, "--insecure-pull") {
				t.Errorf("kaniko args %q: want --insecure and --insecure-pull", args)
			}
		}},
		{"arm64", func(c *Config) { c.Platform = "linux/arm64" }, func(t *testing.T, job *batchv1.Job) {
			spec := job.Spec.Template.Spec
			if spec.NodeSelector["kubernetes.io/arch"] != "arm64" || !slices.Contains(spec.Containers[0].Args, "--custom-platform=linux/arm64") {
				t.Errorf("node selector %v, args %q: want an arm64 node and platform", spec.NodeSelector, spec.Containers[0].Args)
			}
		}},
		{"resources and timeout", func(c *Config) { c.CPU, c.Memory, c.Timeout = "500m", "4Gi", 90*time.Second+time.Millisecond },
			func(t *testing.T, job *batchv1.Job) {
				r := job.Spec.Template.Spec.Containers[0].Resources
				if r.Requests.Cpu().String() != "500m" || r.Requests.Memory().String() != "4Gi" || r.Limits.Memory().String() != "4Gi" {
					t.Errorf("kaniko resources %+v: want 500m CPU and 4Gi requested, 4Gi limit", r)
				}
				if got := *job.Spec.ActiveDeadlineSeconds; got != 91 {
					t.Errorf("active deadline %ds, want the timeout rounded up: 91s", got)
				}
			}},
		{"images", func(c *Config) {
			c.Image, c.FetchImage = "mirror.example.com/kaniko:v1.25.0", "mirror.example.com/curl:8.12.0"
		},
			func(t *testing.T, job *batchv1.Job) {
				spec := job.Spec.Template.Spec
				if spec.Containers[0].Image != "mirror.example.com/kaniko:v1.25.0" || spec.InitContainers[0].Image != "mirror.example.com/curl:8.12.0" {
					t.Errorf("images %s and %s: want the configured ones", spec.Containers[0].Image, spec.InitContainers[0].Image)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, MakeBuildJob(testConfig(t, tc.change), testBuildJob())) })
	}
}

// TestConfigCheck: each invalid setting is refused with a message that
// names it.
func TestConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no namespace", func(c *Config) { c.Namespace = "" }, "namespace of the builds"},
		{"bad namespace", func(c *Config) { c.Namespace = "Builds" }, "namespace of the builds"},
		{"no repository", func(c *Config) { c.Repository = "" }, "image repository"},
		{"kaniko latest", func(c *Config) { c.Image = "gcr.io/kaniko-project/executor:latest" }, "kaniko image"},
		{"kaniko untagged", func(c *Config) { c.Image = "gcr.io/kaniko-project/executor" }, "name a version"},
		{"download image latest", func(c *Config) { c.FetchImage = "curlimages/curl" }, "image of the build context's download"},
		{"bad base image", func(c *Config) { c.BaseImages = map[string]string{"python3.11": "Not A Ref"} }, "base image"},
		{"bad registry secret", func(c *Config) { c.RegistrySecret = "Push_Creds" }, "registry secret"},
		{"bad platform", func(c *Config) { c.Platform = "windows/amd64" }, "image platform"},
		{"bad cpu", func(c *Config) { c.CPU = "lots" }, "kaniko CPU"},
		{"too little memory", func(c *Config) { c.Memory = "64Mi" }, "kaniko memory: 64Mi is less than 256Mi"},
		{"timeout too long", func(c *Config) { c.Timeout = 48 * time.Hour }, "build timeout 48h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Namespace: "sless-builds", Repository: "registry.example.com/sless/functions"}
			tc.change(&c)
			_, err := c.withDefaults()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
	for _, ok := range []string{"gcr.io/kaniko-project/executor:v1.24.0",
		"gcr.io/kaniko-project/executor@sha256:" + strings.Repeat("a", 64)} {
		if err := settings.CheckImage(ok); err != nil {
			t.Errorf("CheckImage(%q) = %v, want nil", ok, err)
		}
	}
}

const testDigest = "sha256:4d48f5f3c0de0000000000000000000000000000000000000000000000000042"

// TestJobState: what a Job and its pod say, as the Job controller and the
// kubelet report it.
func TestJobState(t *testing.T) {
	running := func(c *corev1.ContainerStatus) {
		c.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	}
	exited := func(code int32, reason, msg string) func(*corev1.ContainerStatus) {
		return func(c *corev1.ContainerStatus) {
			c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg}}
		}
	}
	waiting := func(reason, msg string) func(*corev1.ContainerStatus) {
		return func(c *corev1.ContainerStatus) {
			c.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
		}
	}
	fetched := exited(0, "Completed", "")
	const pipFailure = "ERROR: No matching distribution found for nosuchpkg\n" +
		"error building image: error building stage: failed to execute command: waiting for process to exit: exit status 1\n"
	for _, tc := range []struct {
		name          string
		job           string // "", "complete", "failed", "deadline"
		noPod         bool
		fetch, kaniko func(*corev1.ContainerStatus)
		want          state
		wantErr       string // a part of the error's message
		wantCodeFault bool   // a *build.Error
	}{
		{name: "pending", fetch: waiting("PodInitializing", ""), want: state{}},
		{name: "image pull failing", fetch: waiting("ImagePullBackOff", "back-off pulling curl"),
			want: state{waiting: "container fetch-context: ImagePullBackOff: back-off pulling curl"}},
		{name: "building", fetch: fetched, kaniko: running, want: state{started: true}},
		{name: "built", job: "complete", fetch: fetched, kaniko: exited(0, "Completed", testDigest+"\n"),
			want: state{done: true, started: true, result: build.Result{Artifact: "registry.example.com/sless/functions@" + testDigest}}},
		{name: "completed without a digest", job: "complete", fetch: fetched, kaniko: exited(0, "Completed", "done"),
			wantErr: "without an image digest"},
		{name: "completed, pod gone", job: "complete", noPod: true, wantErr: "state of its pod"},
		{name: "install failed", job: "failed", fetch: fetched, kaniko: exited(1, "Error", pipFailure),
			wantErr: "installing dependencies from requirements.txt failed", wantCodeFault: true},
		{name: "out of memory", job: "failed", fetch: fetched, kaniko: exited(137, "OOMKilled", "Collecting torch"),
			wantErr: "ran out of memory", wantCodeFault: true},
		{name: "push refused", job: "failed", fetch: fetched,
			kaniko:  exited(1, "Error", "error checking push permissions -- make sure you entered the correct tag name: UNAUTHORIZED"),
			wantErr: "error checking push permissions"},
		{name: "download failed", job: "failed", fetch: exited(22, "Error", "curl: (22) The requested URL returned error: 403"),
			wantErr: "could not download its build context: curl: (22)"},
		{name: "failed, pod gone", job: "failed", noPod: true, wantErr: "its pod is gone"},
		{name: "deadline", job: "deadline", fetch: fetched, kaniko: running, want: state{timedOut: true, started: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "build-hello-1",
				Annotations: map[string]string{AnnotationImage: "registry.example.com/sless/functions:sless-1"}}}
			switch tc.job {
			case "complete":
				job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
			case "failed":
				job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue,
					Reason: batchv1.JobReasonBackoffLimitExceeded}}
			case "deadline":
				job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue,
					Reason: batchv1.JobReasonDeadlineExceeded}}
			}
			var pods []corev1.Pod
			if !tc.noPod {
				old := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "old", CreationTimestamp: metav1.Unix(1, 0)}}
				pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "new", CreationTimestamp: metav1.Unix(2, 0)}}
				if tc.fetch != nil {
					cs := corev1.ContainerStatus{Name: fetchContainer}
					tc.fetch(&cs)
					pod.Status.InitContainerStatuses = []corev1.ContainerStatus{cs}
				}
				if tc.kaniko != nil {
					cs := corev1.ContainerStatus{Name: kanikoContainer}
					tc.kaniko(&cs)
					pod.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
				}
				// The newest pod is the one read, wherever it is listed.
				pods = []corev1.Pod{pod, old}
			}
			got := jobState(job, pods, "requirements.txt")
			if tc.wantErr != "" {
				if !got.done || got.err == nil || !strings.Contains(got.err.Error(), tc.wantErr) {
					t.Fatalf("got %+v, want a failure with %q", got, tc.wantErr)
				}
				be, isCode := build.AsError(got.err)
				if isCode != tc.wantCodeFault {
					t.Errorf("error %v is the code's fault: %t, want %t", got.err, isCode, tc.wantCodeFault)
				}
				if isCode && be.Log != pods[0].Status.ContainerStatuses[0].State.Terminated.Message {
					t.Errorf("build log %q, want kaniko's termination message", be.Log)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(state{}), cmp.Comparer(func(a, b error) bool { return errors.Is(a, b) })); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWorkspaceSize(t *testing.T) {
	for _, tc := range []struct {
		bytes int64
		want  string
	}{{0, "2Mi"}, {1, "2Mi"}, {1 << 20, "3Mi"}, {250 << 20, "252Mi"}} {
		if got := workspaceSize(tc.bytes); got.Cmp(resource.MustParse(tc.want)) != 0 {
			t.Errorf("workspaceSize(%d) = %s, want %s", tc.bytes, got.String(), tc.want)
		}
	}
}
