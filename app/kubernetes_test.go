//go:build cluster

package app

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"sless.kube5s.ru/sless/api/v1alpha1"
	"sless.kube5s.ru/sless/client"
	"sless.kube5s.ru/sless/internal/names"
	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/internal/testenv/kubeenv"
	"sless.kube5s.ru/sless/modules/build/crane/cranetest"
	"sless.kube5s.ru/sless/modules/build/kaniko"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/runtime/python"
	"sless.kube5s.ru/sless/modules/server"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/runtimes"
)

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m)) }

// writeEnvKubeconfig writes a kubeconfig of env's API server and returns
// its path.
func writeEnvKubeconfig(t *testing.T, env *kubeenv.Env) string {
	t.Helper()
	cfg := env.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestKubernetesModeEndToEnd runs the server in the kubernetes mode against
// a real API server, PostgreSQL, an S3 server and a registry, and drives it
// with the client the CLI and the embedded mode's end-to-end tests use: the
// REST calls that deploy a function make its custom resources and its
// Deployment, it reports Ready once the Deployment is available (this API
// server has no kubelet: the test writes the Deployment's status), kubectl
// sees the phase and URL, /fn answers 503 while it cannot route to pods and
// 404 once the last http trigger is disabled (the Deployment scaled to zero
// in place), and deleting it removes its triggers, its Deployment and then
// its Function.
func TestKubernetesModeEndToEnd(t *testing.T) {
	env := kubeenv.Start(t)
	dbURL := testenv.Postgres(t)
	s3 := testenv.S3(t)
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	py := python.New()
	if err := cranetest.PushBase(host+"/"+py.BaseImage(), py.ImageLayout(), runtimes.PythonServer); err != nil {
		t.Fatal(err)
	}
	ns := "e2e-" + strings.ToLower(rand.Text()[:10]) // an API namespace of this test's own
	cfg := testConfig(t, "--mode", "kubernetes", "--kubeconfig", writeEnvKubeconfig(t, env), "--leader-elect=false",
		"--database-url", dbURL, "--blob-url", s3.NewBucketURL(), "--s3-access-key", s3.AccessKey, "--s3-secret-key", s3.SecretKey,
		"--api-token", "token-token-token-1", "--image-repository", host+"/sless/functions",
		"--public-url", "https://sless.example.com")
	token, lock, err := Prepare(cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	var srv *server.Server
	application := fxtest.New(t, Options(cfg, token, discard), fx.Populate(&srv))
	application.RequireStart()
	defer application.RequireStop()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := client.Resolve("http://"+srv.Addr().String(), token)
	if err != nil {
		t.Fatal(err)
	}
	fn, err := c.CreateFunction(ctx, &functions.Function{Name: "hello", Namespace: ns,
		Spec: functions.Spec{Runtime: "python3.11", Env: map[string]string{"GREETING": "hi"}}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := c.CreateTrigger(ctx, &triggers.Trigger{Name: "hello", Namespace: ns,
		Spec: triggers.Spec{Function: "hello", Type: triggers.TypeHTTP}}); err != nil {
		t.Fatalf("create the http trigger: %v", err)
	}
	code, err := cranetest.Zip(map[string]string{"handler.py": "def handle(event, context):\n    return {'message': 'hello'}\n"})
	if err != nil {
		t.Fatal(err)
	}
	fn, err = c.UploadCode(ctx, ns, "hello", code)
	if err != nil {
		t.Fatalf("upload: %v", err)
	}

	// The build (crane, into the registry) ends in a Deployment of its
	// image, which this API server never makes available by itself.
	kube := env.Client
	depName := types.NamespacedName{Namespace: names.Namespace(ns), Name: names.Deployment("hello")}
	var dep appsv1.Deployment
	waitFor(t, ctx, "the function's Deployment", func() error { return kube.Get(ctx, depName, &dep) })
	if img := dep.Spec.Template.Spec.Containers[0].Image; !strings.HasPrefix(img, host+"/sless/functions@sha256:") {
		t.Errorf("the Deployment runs %s; want an image of %s/sless/functions pinned by digest", img, host)
	}
	got, err := c.GetFunction(ctx, ns, "hello")
	if err != nil || got.Status.Phase == functions.PhaseReady {
		t.Fatalf("before the Deployment is available: %+v, %v; want not Ready", got, err)
	}
	setAvailable(t, ctx, env, depName)
	fn, err = c.WaitSettled(ctx, ns, "hello", fn.Generation, nil)
	if err != nil || fn.Status.Phase != functions.PhaseReady {
		t.Fatalf("settled: %+v, %v; want Ready", fn, err)
	}

	// What kubectl get functions shows.
	var cr v1alpha1.Function
	if err := kube.Get(ctx, types.NamespacedName{Namespace: names.Namespace(ns), Name: "hello"}, &cr); err != nil {
		t.Fatal(err)
	}
	if cr.Status.Phase != "Ready" || cr.Status.URL != "https://sless.example.com/fn/"+ns+"/hello" {
		t.Errorf("the Function's status: phase %q, URL %q", cr.Status.Phase, cr.Status.URL)
	}

	// /fn: exposed, but no data plane yet.
	status, body := get(t, c.InvokeURL(ns, "hello"))
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "not available in this mode yet") {
		t.Errorf("/fn of a Ready function: %d %s; want 503 saying it is not available in this mode yet", status, body)
	}
	tr, err := c.GetTrigger(ctx, ns, "hello")
	if err != nil {
		t.Fatal(err)
	}
	tr.Enabled = ptr.To(false)
	if _, err := c.UpdateTrigger(ctx, tr); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "/fn 404 after the trigger is disabled", func() error {
		if status, body := get(t, c.InvokeURL(ns, "hello")); status != http.StatusNotFound {
			return fmt.Errorf("%d %s", status, body)
		}
		return nil
	})
	waitFor(t, ctx, "the Deployment scaled to zero", func() error {
		if err := kube.Get(ctx, depName, &dep); err != nil {
			return err
		}
		if n := ptr.Deref(dep.Spec.Replicas, -1); n != 0 {
			return fmt.Errorf("%d replicas", n)
		}
		return nil
	})

	del, err := c.DeleteFunction(ctx, ns, "hello")
	if err != nil || len(del.Deleted["triggers"]) != 1 {
		t.Fatalf("delete: %+v, %v; want its trigger deleted with it", del, err)
	}
	waitFor(t, ctx, "the function gone", func() error {
		if _, err := c.GetFunction(ctx, ns, "hello"); !client.IsNotFound(err) {
			return fmt.Errorf("get: %v", err)
		}
		return nil
	})
	if err := kube.Get(ctx, depName, &dep); !apierrors.IsNotFound(err) {
		t.Errorf("the Deployment after the function is gone: %v; want it deleted", err)
	}
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() error) {
	t.Helper()
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: still %v", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// setAvailable writes the status of a Deployment whose pods all run its
// current spec, as the Deployment controller would.
func setAvailable(t *testing.T, ctx context.Context, env *kubeenv.Env, name types.NamespacedName) {
	t.Helper()
	waitFor(t, ctx, "writing the Deployment's status", func() error {
		var d appsv1.Deployment
		if err := env.Client.Get(ctx, name, &d); err != nil {
			return err
		}
		n := ptr.Deref(d.Spec.Replicas, 1)
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n,
			ReadyReplicas: n, AvailableReplicas: n}
		return env.Client.Status().Update(ctx, &d)
	})
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestKubernetesModeBuildsWithKaniko runs the kubernetes mode with the
// kaniko builder: each upload becomes a build Job whose outcome, read from
// the Job's and its pod's status (written here as the Job controller and
// the kubelet would), is the function's: a digest rolls out, kaniko's log
// tail is the build log of a failure, and a pod that never starts fails
// the build at the build timeout; a failed build keeps the last good image.
func TestKubernetesModeBuildsWithKaniko(t *testing.T) {
	env := kubeenv.Start(t)
	dbURL := testenv.Postgres(t)
	s3 := testenv.S3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := env.Client
	builds := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "builds-" + strings.ToLower(rand.Text()[:8]),
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}
	if err := kube.Create(ctx, builds); err != nil {
		t.Fatal(err)
	}
	const repo = "registry.example.com/sless/functions"
	ns := "e2e-" + strings.ToLower(rand.Text()[:10])
	cfg := testConfig(t, "--mode", "kubernetes", "--kubeconfig", writeEnvKubeconfig(t, env), "--leader-elect=false",
		"--database-url", dbURL, "--blob-url", s3.NewBucketURL(), "--s3-access-key", s3.AccessKey, "--s3-secret-key", s3.SecretKey,
		"--api-token", "token-token-token-1", "--builder", "kaniko", "--image-repository", repo,
		"--kaniko-namespace", builds.Name, "--build-timeout", "4s")
	token, lock, err := Prepare(cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	var srv *server.Server
	application := fxtest.New(t, Options(cfg, token, discard), fx.Populate(&srv))
	application.RequireStart()
	defer application.RequireStop()
	c, err := client.Resolve("http://"+srv.Addr().String(), token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateFunction(ctx, &functions.Function{Name: "hello", Namespace: ns, Spec: functions.Spec{Runtime: "python3.11"}}); err != nil {
		t.Fatal(err)
	}
	upload := func(files map[string]string) *functions.Function {
		t.Helper()
		code, err := cranetest.Zip(files)
		if err != nil {
			t.Fatal(err)
		}
		fn, err := c.UploadCode(ctx, ns, "hello", code)
		if err != nil {
			t.Fatalf("upload: %v", err)
		}
		return fn
	}
	// buildJob waits for the build Job of the function's code sha.
	buildJob := func(sha string) *batchv1.Job {
		t.Helper()
		var job *batchv1.Job
		waitFor(t, ctx, "the build Job of "+sha[:12], func() error {
			var jobs batchv1.JobList
			if err := kube.List(ctx, &jobs, ctrlclient.InNamespace(builds.Name),
				ctrlclient.MatchingLabels{kaniko.LabelFunction: "hello"}); err != nil {
				return err
			}
			for i := range jobs.Items {
				// The Job of the newest build: the builder deletes the
				// others.
				if j := &jobs.Items[i]; j.DeletionTimestamp == nil && j.Status.Succeeded == 0 && j.Status.Failed == 0 {
					job = j
				}
			}
			if job == nil {
				return fmt.Errorf("%d Jobs", len(jobs.Items))
			}
			return nil
		})
		return job
	}

	// Success: the digest kaniko reports is the image that rolls out.
	const digest = "sha256:4d48f5f3c0de0000000000000000000000000000000000000000000000000042"
	fn := upload(map[string]string{"handler.py": "def handle(event, context):\n    return 1\n"})
	job := buildJob(fn.CodeSHA256)
	runBuildPod(t, ctx, env, job, corev1.PodSucceeded, exitedState(0, "Completed", ""), exitedState(0, "Completed", digest))
	finishJob(t, ctx, env, job, true, "")
	depName := types.NamespacedName{Namespace: names.Namespace(ns), Name: names.Deployment("hello")}
	var dep appsv1.Deployment
	waitFor(t, ctx, "the Deployment", func() error { return kube.Get(ctx, depName, &dep) })
	if img := dep.Spec.Template.Spec.Containers[0].Image; img != repo+"@"+digest {
		t.Errorf("the Deployment runs %s; want %s", img, repo+"@"+digest)
	}
	setAvailable(t, ctx, env, depName)
	if fn, err = c.WaitSettled(ctx, ns, "hello", fn.Generation, nil); err != nil || fn.Status.Phase != functions.PhaseReady {
		t.Fatalf("after the build: %+v, %v; want Ready", fn, err)
	}

	// Failure: kaniko's log is the build log; the last image keeps serving.
	const log = "Collecting nosuchpkg\nERROR: No matching distribution found for nosuchpkg\n" +
		"error building image: error building stage: failed to execute command: waiting for process to exit: exit status 1"
	fn = upload(map[string]string{"handler.py": "def handle(event, context):\n    return 2\n", "requirements.txt": "nosuchpkg\n"})
	job = buildJob(fn.CodeSHA256)
	runBuildPod(t, ctx, env, job, corev1.PodFailed, exitedState(0, "Completed", ""), exitedState(1, "Error", log))
	finishJob(t, ctx, env, job, false, batchv1.JobReasonBackoffLimitExceeded)
	fn, err = c.WaitSettled(ctx, ns, "hello", fn.Generation, nil)
	if err != nil || fn.Status.Phase != functions.PhaseFailed || fn.Status.BuildLog != log ||
		!strings.Contains(fn.Status.Message, "installing dependencies from requirements.txt failed") {
		t.Fatalf("after a failed build: %+v, %v; want Failed with kaniko's log", fn.Status, err)
	}

	// Timeout: a pod that never starts.
	fn = upload(map[string]string{"handler.py": "def handle(event, context):\n    return 3\n"})
	job = buildJob(fn.CodeSHA256)
	runBuildPod(t, ctx, env, job, corev1.PodPending,
		&corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}, nil)
	fn, err = c.WaitSettled(ctx, ns, "hello", fn.Generation, nil)
	if err != nil || fn.Status.Phase != functions.PhaseFailed {
		t.Fatalf("after a build past its timeout: %+v, %v; want Failed", fn.Status, err)
	}
	waitFor(t, ctx, "the timed-out Job deleted", func() error {
		var j batchv1.Job
		if err := kube.Get(ctx, ctrlclient.ObjectKeyFromObject(job), &j); !apierrors.IsNotFound(err) {
			return fmt.Errorf("get: %v", err)
		}
		return nil
	})
	if err := kube.Get(ctx, depName, &dep); err != nil || dep.Spec.Template.Spec.Containers[0].Image != repo+"@"+digest {
		t.Errorf("after failed builds the Deployment runs %s (%v); want the last good %s", dep.Spec.Template.Spec.Containers[0].Image, err, repo+"@"+digest)
	}
}

// runBuildPod creates the pod of a build Job, as the Job controller would,
// with the status the kubelet would report for its download (init) and
// kaniko (nil: none yet).
func runBuildPod(t *testing.T, ctx context.Context, env *kubeenv.Env, job *batchv1.Job, phase corev1.PodPhase, init, kanikoState *corev1.ContainerState) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-x1", Namespace: job.Namespace, Labels: job.Spec.Template.Labels},
		Spec:       *job.Spec.Template.Spec.DeepCopy(),
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatalf("creating the pod of the build Job: %v", err)
	}
	pod.Status.Phase = phase
	if init != nil {
		pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.InitContainers[0].Name, Image: pod.Spec.InitContainers[0].Image, State: *init}}
	}
	if kanikoState != nil {
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image, State: *kanikoState}}
	}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatalf("setting the status of the build pod: %v", err)
	}
}

// finishJob sets a build Job's status as the Job controller does when its
// pod ended: succeeded, or failed for reason.
func finishJob(t *testing.T, ctx context.Context, env *kubeenv.Env, job *batchv1.Job, succeeded bool, reason string) {
	t.Helper()
	now := metav1.Now()
	job.Status.StartTime = &now
	cond := func(typ batchv1.JobConditionType) batchv1.JobCondition {
		return batchv1.JobCondition{Type: typ, Status: corev1.ConditionTrue, Reason: reason, LastProbeTime: now, LastTransitionTime: now}
	}
	if succeeded {
		job.Status.Succeeded, job.Status.CompletionTime = 1, &now
		job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobSuccessCriteriaMet), cond(batchv1.JobComplete)}
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobFailureTarget), cond(batchv1.JobFailed)}
	}
	if err := env.Client.Status().Update(ctx, job); err != nil {
		t.Fatalf("setting the status of the build Job: %v", err)
	}
}

func exitedState(code int32, reason, msg string) *corev1.ContainerState {
	now := metav1.Now()
	return &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg,
		StartedAt: now, FinishedAt: now}}
}

// TestKubernetesModeBinary runs the real binary of the cluster build as
// `sless server --mode kubernetes`, its settings from flags and the
// environment as the manifests give them, and deploys with its CLI: `sless
// deploy` creates the function and its http trigger, uploads and waits
// until the function is Ready (the test makes its Deployment available,
// as a kubelet would), and `sless fn delete` removes it.
func TestKubernetesModeBinary(t *testing.T) {
	env := kubeenv.Start(t)
	dbURL := testenv.Postgres(t)
	s3 := testenv.S3(t)
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	py := python.New()
	if err := cranetest.PushBase(host+"/"+py.BaseImage(), py.ImageLayout(), runtimes.PythonServer); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "sless")
	build := exec.Command("go", "build", "-tags", "cluster", "-o", bin, "./cmd/sless")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags cluster ./cmd/sless: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	listen := "127.0.0.1:" + testenv.FreePort(t)
	const token = "token-token-token-1"
	srv := exec.CommandContext(ctx, bin, "server", "--mode", "kubernetes", "--listen", listen, "--data-dir", t.TempDir(),
		"--kubeconfig", writeEnvKubeconfig(t, env), "--leader-elect=false", "--image-repository", host+"/sless/functions")
	srv.Env = append(os.Environ(), "SLESS_DATABASE_URL="+dbURL, "SLESS_BLOB_URL="+s3.NewBucketURL(),
		"SLESS_S3_ACCESS_KEY="+s3.AccessKey, "SLESS_S3_SECRET_KEY="+s3.SecretKey, "SLESS_API_TOKEN="+token)
	var logs testenv.SyncBuffer
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Process.Signal(os.Interrupt)
		srv.Wait()
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	}()
	endpoint := "http://" + listen
	waitFor(t, ctx, "the server ready", func() error {
		resp, err := http.Get(endpoint + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "handler.py"), []byte("def handle(event, context):\n    return 'hi'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ns := "e2e-" + strings.ToLower(rand.Text()[:10])
	cli := func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, bin, append(args, "-n", ns)...)
		cmd.Env = append(os.Environ(), "SLESS_ENDPOINT="+endpoint, "SLESS_TOKEN="+token, "HOME="+t.TempDir())
		return cmd
	}
	// The kubelet's part: the function's Deployment becomes available.
	depName := types.NamespacedName{Namespace: names.Namespace(ns), Name: names.Deployment("hello")}
	go func() {
		for ctx.Err() == nil {
			var d appsv1.Deployment
			if env.Client.Get(ctx, depName, &d) == nil && d.Status.ObservedGeneration != d.Generation {
				n := ptr.Deref(d.Spec.Replicas, 1)
				d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n,
					ReadyReplicas: n, AvailableReplicas: n}
				env.Client.Status().Update(ctx, &d)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	out, err := cli("deploy", dir, "--name", "hello", "--runtime", "python3.11", "--wait", "2m").CombinedOutput()
	if err != nil {
		t.Fatalf("sless deploy: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "/fn/"+ns+"/hello") {
		t.Errorf("sless deploy printed no /fn URL of the function:\n%s", out)
	}
	out, err = cli("fn", "get", "hello", "-o", "json").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"phase": "Ready"`) {
		t.Errorf("sless fn get: %v\n%s\nwant phase Ready", err, out)
	}
	if status, body := get(t, endpoint+"/fn/"+ns+"/hello"); status != http.StatusServiceUnavailable {
		t.Errorf("/fn: %d %s; want 503 until the data plane exists", status, body)
	}
	if out, err := cli("fn", "delete", "hello").CombinedOutput(); err != nil {
		t.Fatalf("sless fn delete: %v\n%s", err, out)
	}
	waitFor(t, ctx, "the Function gone", func() error {
		var cr v1alpha1.Function
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: names.Namespace(ns), Name: "hello"}, &cr); !apierrors.IsNotFound(err) {
			return fmt.Errorf("get: %v", err)
		}
		return nil
	})
}
