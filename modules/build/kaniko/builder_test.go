package kaniko

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/crane/cranetest"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/nodejs"
	"sless.kube5s.ru/sless/modules/runtime/python"
	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/storage/blobs3"
)

// env is a kaniko builder on the test API server and a real S3 server
// (versitygw), with the uploads in the same bucket as the build contexts,
// as the cluster mode keeps them.
type env struct {
	t         *testing.T
	kube      client.Client
	namespace string // of the builds, enforcing the baseline Pod Security profile
	blobs     storage.Blobs
	contexts  *S3Contexts
	cfg       Config
	b         *Builder
}

const repository = "registry.example.com/sless/functions"

func newEnv(t *testing.T, change func(*Config)) *env {
	t.Helper()
	e := &env{t: t, kube: cluster(t)}
	srv := testenv.S3(t)
	s3cfg, err := blobs3.ParseURL(srv.NewBucketURL())
	if err != nil {
		t.Fatal(err)
	}
	s3cfg.AccessKey, s3cfg.SecretKey, s3cfg.TempDir = srv.AccessKey, srv.SecretKey, t.TempDir()
	store, err := blobs3.New(s3cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.EnsureBucket(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.blobs = store
	e.contexts, err = NewS3Contexts(S3Config{Endpoint: s3cfg.Endpoint, Bucket: s3cfg.Bucket, Prefix: s3cfg.Prefix,
		Region: s3cfg.Region, AccessKey: s3cfg.AccessKey, SecretKey: s3cfg.SecretKey, UseSSL: s3cfg.UseSSL, PathStyle: s3cfg.PathStyle})
	if err != nil {
		t.Fatal(err)
	}
	e.namespace = e.newNamespace("baseline")
	e.cfg = Config{Namespace: e.namespace, Repository: repository, Timeout: time.Minute, Poll: 20 * time.Millisecond, TempDir: t.TempDir()}
	if change != nil {
		change(&e.cfg)
	}
	e.b = e.newBuilder()
	return e
}

// newBuilder starts a builder of e's configuration, stopped when the test
// ends.
func (e *env) newBuilder() *Builder {
	e.t.Helper()
	runtimes, err := runtime.NewRegistry([]runtime.Provider{python.New(), nodejs.New()})
	if err != nil {
		e.t.Fatal(err)
	}
	b, err := New(e.cfg, e.kube, e.contexts, e.blobs, runtimes, slog.New(slog.DiscardHandler))
	if err != nil {
		e.t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { b.Stop(context.Background()) })
	return b
}

// newNamespace creates a namespace that enforces the Pod Security profile
// level. Namespaces are never removed: without a namespace controller they
// would stay terminating anyway.
func (e *env) newNamespace(level string) string {
	e.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t-" + strings.ToLower(rand.Text()[:12]),
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": level}}}
	if err := e.kube.Create(context.Background(), ns); err != nil {
		e.t.Fatal(err)
	}
	return ns.Name
}

// upload stores a zip of files as uploaded code and returns a request to
// build it.
func (e *env) upload(rt, function string, files map[string]string) build.Request {
	e.t.Helper()
	data, err := cranetest.Zip(files)
	if err != nil {
		e.t.Fatal(err)
	}
	blob, err := e.blobs.Put(context.Background(), bytes.NewReader(data))
	if err != nil {
		e.t.Fatal(err)
	}
	return build.Request{Namespace: "team-a", Function: function, Runtime: rt, Handler: "handler.handle", CodeSHA256: blob.SHA256}
}

// start asks for req's build, which must not be done yet, and returns a
// channel closed by its notification.
func (e *env) start(b *Builder, req build.Request) <-chan struct{} {
	e.t.Helper()
	notified := make(chan struct{})
	p, err := b.Build(context.Background(), req, func() { close(notified) })
	if err != nil || p.Done {
		e.t.Fatalf("Build = %+v, %v; want a build started", p, err)
	}
	return notified
}

// end waits for the notification of req's build and returns its end.
func (e *env) end(b *Builder, req build.Request, notified <-chan struct{}) build.Progress {
	e.t.Helper()
	select {
	case <-notified:
	case <-time.After(time.Minute):
		e.t.Fatal("the build never notified its end")
	}
	p, err := b.Build(context.Background(), req, nil)
	if err != nil || !p.Done {
		e.t.Fatalf("Build after the notification = %+v, %v; want the end", p, err)
	}
	return p
}

// job waits until the Job of req exists and returns it.
func (e *env) job(req build.Request) *batchv1.Job {
	e.t.Helper()
	job := &batchv1.Job{}
	key := client.ObjectKey{Namespace: e.namespace, Name: jobName(req)}
	poll(e.t, "the Job of "+req.Function, func() bool { return e.kube.Get(context.Background(), key, job) == nil })
	return job
}

// gone waits until job no longer exists.
func (e *env) gone(job *batchv1.Job) {
	e.t.Helper()
	poll(e.t, "the deletion of Job "+job.Name, func() bool {
		return apierrors.IsNotFound(e.kube.Get(context.Background(), client.ObjectKeyFromObject(job), &batchv1.Job{}))
	})
}

// runPod creates the pod of job, as the Job controller would, with the
// status the kubelet would report: init and kaniko are the states of the
// download and of kaniko (nil: none yet).
func (e *env) runPod(job *batchv1.Job, phase corev1.PodPhase, init, kaniko *corev1.ContainerState) {
	e.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-x1", Namespace: job.Namespace, Labels: job.Spec.Template.Labels},
		Spec:       *job.Spec.Template.Spec.DeepCopy(),
	}
	ctx := context.Background()
	if err := e.kube.Create(ctx, pod); err != nil {
		e.t.Fatalf("creating the pod of the build Job: %v", err)
	}
	pod.Status.Phase = phase
	if init != nil {
		pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: fetchContainer, Image: pod.Spec.InitContainers[0].Image, State: *init}}
	}
	if kaniko != nil {
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: kanikoContainer, Image: pod.Spec.Containers[0].Image, State: *kaniko}}
	}
	if err := e.kube.Status().Update(ctx, pod); err != nil {
		e.t.Fatalf("setting the status of the build pod: %v", err)
	}
}

// finish sets job's status as the Job controller does when its pod ended:
// succeeded, or failed for reason.
func (e *env) finish(job *batchv1.Job, succeeded bool, reason string) {
	e.t.Helper()
	now := metav1.Now()
	job.Status.StartTime = &now
	cond := func(t batchv1.JobConditionType) batchv1.JobCondition {
		return batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, LastProbeTime: now, LastTransitionTime: now}
	}
	if succeeded {
		job.Status.Succeeded, job.Status.CompletionTime = 1, &now
		job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobSuccessCriteriaMet), cond(batchv1.JobComplete)}
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobFailureTarget), cond(batchv1.JobFailed)}
	}
	if err := e.kube.Status().Update(context.Background(), job); err != nil {
		e.t.Fatalf("setting the status of the build Job: %v", err)
	}
}

// context downloads job's build context as its pod would, with the URL of
// its download, and returns its entries; nil when S3 has it no more.
func (e *env) context(job *batchv1.Job) map[string]tarEntry {
	e.t.Helper()
	args := job.Spec.Template.Spec.InitContainers[0].Args
	resp, err := http.Get(args[len(args)-1])
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("downloading the build context: %s: %s", resp.Status, data)
	}
	entries := map[string]tarEntry{}
	for _, en := range readTar(e.t, data) {
		entries[en.Name] = en
	}
	return entries
}

func running() *corev1.ContainerState {
	return &corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
}

func exited(code int32, reason, msg string) *corev1.ContainerState {
	now := metav1.Now()
	return &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg,
		StartedAt: now, FinishedAt: now}}
}

func waiting(reason, msg string) *corev1.ContainerState {
	return &corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
}

// poll waits up to a minute for cond.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBuildSucceeds: the build context in S3 holds the code, the wrapper
// and a Dockerfile with the runtime's install step; a Job that completed
// with the digest in kaniko's termination message is the artifact, pinned
// by digest; then the Job and the context are removed.
func TestBuildSucceeds(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range []struct {
		p                dockerfileRuntime
		depFile, install string
	}{
		{python.New(), "requirements.txt", "\nRUN python3.11 -m pip install "},
		{nodejs.New(), "package.json", "\nRUN npm install "},
	} {
		t.Run(tc.p.Name(), func(t *testing.T) {
			handlerFile := map[string]string{"python3.11": "handler.py", "nodejs20": "handler.js"}[tc.p.Name()]
			req := e.upload(tc.p.Name(), "fn-"+tc.p.Name()[:4], map[string]string{handlerFile: "// the handler\n", tc.depFile: "{}\n"})
			notified := e.start(e.b, req)
			job := e.job(req)

			files := e.context(job)
			wrapperName, wrapper := tc.p.Wrapper()
			for name, want := range map[string]string{
				"code/" + handlerFile: "// the handler\n", "code/" + tc.depFile: "{}\n", "sless/" + wrapperName: string(wrapper),
			} {
				if got, ok := files[name]; !ok || got.Content != want {
					t.Errorf("the context's %s is %q (there: %t), want %q", name, got.Content, ok, want)
				}
			}
			if df := files["Dockerfile"].Content; !strings.HasPrefix(df, "# The image") || !strings.Contains(df, tc.install) {
				t.Errorf("the context's Dockerfile:\n%s\nwant one with %q", df, tc.install)
			}

			e.runPod(job, corev1.PodSucceeded, exited(0, "Completed", ""), exited(0, "Completed", testDigest))
			e.finish(job, true, "")
			p := e.end(e.b, req, notified)
			if want := repository + "@" + testDigest; p.Err != nil || p.Result.Artifact != want {
				t.Errorf("build: %+v, want the artifact %s", p, want)
			}
			e.gone(job)
			if files := e.context(job); files != nil {
				t.Errorf("the build context is still in S3 after its build: %d entries", len(files))
			}
		})
	}
}

// TestBuildFailsWithTheLogTail: a Job whose install step failed is the
// code's fault, with the end of kaniko's log (its termination message) as
// the build log; the Job is removed.
func TestBuildFailsWithTheLogTail(t *testing.T) {
	e := newEnv(t, nil)
	req := e.upload("python3.11", "hello", map[string]string{"handler.py": "", "requirements.txt": "nosuchpkg\n"})
	notified := e.start(e.b, req)
	job := e.job(req)
	const log = "Collecting nosuchpkg\nERROR: No matching distribution found for nosuchpkg\n" +
		"error building image: error building stage: failed to execute command: waiting for process to exit: exit status 1"
	e.runPod(job, corev1.PodFailed, exited(0, "Completed", ""), exited(1, "Error", log))
	e.finish(job, false, batchv1.JobReasonBackoffLimitExceeded)
	p := e.end(e.b, req, notified)
	be, ok := build.AsError(p.Err)
	if !ok || !strings.Contains(be.Msg, "installing dependencies from requirements.txt failed") || be.Log != log {
		t.Errorf("build: %+v; want the code's fault with kaniko's log %q", p, log)
	}
	e.gone(job)
}

// TestBuildFailsForTheServer: a Job that failed for the cluster's or the
// registry's reasons is not the code's fault; its message says what
// failed, for the server's log.
func TestBuildFailsForTheServer(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range []struct {
		name         string
		init, kaniko *corev1.ContainerState
		want         string
	}{
		{"download", exited(22, "Error", "curl: (22) The requested URL returned error: 403"), nil,
			"could not download its build context: curl: (22)"},
		{"push", exited(0, "Completed", ""), exited(1, "Error", "error checking push permissions -- make sure you entered the correct tag name: UNAUTHORIZED"),
			"kaniko exited with code 1: error checking push permissions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := e.upload("python3.11", tc.name, map[string]string{"handler.py": ""})
			notified := e.start(e.b, req)
			job := e.job(req)
			e.runPod(job, corev1.PodFailed, tc.init, tc.kaniko)
			e.finish(job, false, batchv1.JobReasonBackoffLimitExceeded)
			p := e.end(e.b, req, notified)
			if _, isCode := build.AsError(p.Err); p.Err == nil || isCode || !strings.Contains(p.Err.Error(), tc.want) {
				t.Errorf("build: %+v; want a failure of the server with %q", p, tc.want)
			}
			e.gone(job)
		})
	}
}

// TestBuildTimesOut: a Job that runs past the build timeout is deleted and
// the build fails: the code's fault when kaniko ran, the cluster's when the
// pod never started (the message says why it waited).
func TestBuildTimesOut(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Timeout = 2 * time.Second })
	for _, tc := range []struct {
		name         string
		init, kaniko *corev1.ContainerState
		want         string
		wantCode     bool
	}{
		{"kaniko ran", exited(0, "Completed", ""), running(), "the build took longer than 2s", true},
		{"never started", waiting("ImagePullBackOff", "Back-off pulling image"), nil,
			"did not start within the build timeout 2s (container fetch-context: ImagePullBackOff: Back-off pulling image)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := e.upload("python3.11", strings.ReplaceAll(tc.name, " ", "-"), map[string]string{"handler.py": ""})
			notified := e.start(e.b, req)
			job := e.job(req)
			e.runPod(job, corev1.PodPending, tc.init, tc.kaniko)
			p := e.end(e.b, req, notified)
			_, isCode := build.AsError(p.Err)
			if p.Err == nil || isCode != tc.wantCode || !strings.Contains(p.Err.Error(), tc.want) {
				t.Errorf("build: %+v; want a failure with %q (the code's fault: %t)", p, tc.want, tc.wantCode)
			}
			e.gone(job)
		})
	}
}

// TestNewKeyDeletesTheOldJob: a build of a function's new code deletes the
// Job of its old code, and the old build context.
func TestNewKeyDeletesTheOldJob(t *testing.T) {
	e := newEnv(t, nil)
	old := e.upload("python3.11", "hello", map[string]string{"handler.py": "# v1\n"})
	e.start(e.b, old)
	oldJob := e.job(old)
	// Another function's build is left alone.
	other := e.upload("python3.11", "other", map[string]string{"handler.py": "# v1\n"})
	e.start(e.b, other)
	otherJob := e.job(other)

	cur := e.upload("python3.11", "hello", map[string]string{"handler.py": "# v2\n"})
	e.start(e.b, cur)
	e.job(cur)
	e.gone(oldJob)
	if e.context(oldJob) != nil {
		t.Error("the old build context is still in S3")
	}
	if err := e.kube.Get(context.Background(), client.ObjectKeyFromObject(otherJob), &batchv1.Job{}); err != nil {
		t.Errorf("the Job of another function: %v; want it left alone", err)
	}
}

// TestRestartFindsTheJob: a new builder (a restarted server) takes up the
// running Job of the build instead of creating another, and reports its
// end.
func TestRestartFindsTheJob(t *testing.T) {
	e := newEnv(t, nil)
	req := e.upload("python3.11", "hello", map[string]string{"handler.py": ""})
	e.start(e.b, req)
	job := e.job(req)
	if err := e.b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	restarted := e.newBuilder()
	notified := e.start(restarted, req)
	e.runPod(job, corev1.PodSucceeded, exited(0, "Completed", ""), exited(0, "Completed", testDigest))
	e.finish(job, true, "")
	p := e.end(restarted, req, notified)
	if want := repository + "@" + testDigest; p.Err != nil || p.Result.Artifact != want {
		t.Errorf("build after the restart: %+v, want the artifact %s", p, want)
	}
	// finish updated the first Job: had the restarted builder made another,
	// it would not have seen that Job end.
	e.gone(job)
}

// TestCancelDeletesTheJob: Cancel (the function was deleted) deletes its
// Job and build context.
func TestCancelDeletesTheJob(t *testing.T) {
	e := newEnv(t, nil)
	req := e.upload("python3.11", "hello", map[string]string{"handler.py": ""})
	e.start(e.b, req)
	job := e.job(req)
	if err := e.b.Cancel(context.Background(), req.Namespace, req.Function); err != nil {
		t.Fatal(err)
	}
	e.gone(job)
	if e.context(job) != nil {
		t.Error("the build context is still in S3")
	}
}

// TestCodeFaultsStartNoJob: a missing handler, an unsafe archive and
// missing code are the code's fault, found before any Job runs.
func TestCodeFaultsStartNoJob(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range []struct {
		name string
		req  build.Request
		want string
	}{
		{"missing handler", e.upload("python3.11", "a", map[string]string{"main.py": ""}), `handler "handler.handle" needs handler.py`},
		{"unsafe archive", e.upload("python3.11", "b", map[string]string{"../evil.py": ""}), "escapes the archive root"},
		{"missing code", build.Request{Namespace: "team-a", Function: "c", Runtime: "python3.11", CodeSHA256: strings.Repeat("0", 64)},
			"upload it again"},
		{"unknown runtime", build.Request{Namespace: "team-a", Function: "d", Runtime: "cobol", CodeSHA256: strings.Repeat("0", 64)},
			"cobol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := e.end(e.b, tc.req, e.start(e.b, tc.req))
			if be, ok := build.AsError(p.Err); !ok || !strings.Contains(be.Msg, tc.want) {
				t.Errorf("build: %+v; want the code's fault with %q", p, tc.want)
			}
		})
	}
	var jobs batchv1.JobList
	if err := e.kube.List(context.Background(), &jobs, client.InNamespace(e.namespace)); err != nil || len(jobs.Items) > 0 {
		t.Errorf("%d Jobs (%v); want none", len(jobs.Items), err)
	}
}

// TestBuildPodSecurity: a build pod is admitted where the "baseline" Pod
// Security profile is enforced (every test's pods are) and refused where
// "restricted" is, for kaniko's root user and capabilities only: the
// download meets the restricted profile.
func TestBuildPodSecurity(t *testing.T) {
	e := newEnv(t, nil)
	job := MakeBuildJob(e.b.cfg, testBuildJob())
	job.Namespace = e.newNamespace("restricted")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: job.Namespace}, Spec: job.Spec.Template.Spec}
	err := e.kube.Create(context.Background(), pod)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("creating a build pod under the restricted profile: %v; want it refused", err)
	}
	msg := err.Error()
	for _, want := range []string{`container "kaniko" must not include "CHOWN"`, `container "kaniko" must not set runAsUser=0`} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, fetchContainer) {
		t.Errorf("refusal %q names the download's container, which should meet the profile", msg)
	}
}
