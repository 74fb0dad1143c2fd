// Package kaniko is the cluster mode's builder of what the crane builder
// cannot build: code whose dependencies need a real install (a native
// build, a package without a binary wheel). It builds a function's image
// with kaniko in a Kubernetes Job, from a Dockerfile it generates:
//
//   - the build context (the Dockerfile, the runtime's wrapper and the
//     checked upload, as a deterministic tar.gz) goes to S3, next to the
//     uploaded code, keyed by the function and its build key;
//   - a Job in the builds' namespace downloads it through a presigned URL
//     and runs kaniko, which pushes the image to the repository and writes
//     its digest to the termination message of its container (on failure,
//     Kubernetes puts the end of its log there instead);
//   - the artifact is the repository pinned to that digest.
//
// The builder never waits for a Job: each build is a goroutine of
// jobs.Jobs that creates the Job (or finds the one an earlier server
// created: its name carries the build key) and reads its state from the
// API server until it ends, then deletes it. A build past the build
// timeout is deleted and fails; a new build key of a function, and Cancel,
// delete the function's other Jobs.
package kaniko

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.kube5s.ru/sless/internal/keylock"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/imagecode"
	"sless.kube5s.ru/sless/modules/build/jobs"
	"sless.kube5s.ru/sless/modules/build/kaniko/settings"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/build/unzip"
	"sless.kube5s.ru/sless/modules/runtime"
)

// layoutVersion changes when what the builder puts into an image changes,
// so that an image of an older builder is not taken for a newer one's.
const layoutVersion = "sless-kaniko/v1"

// Defaults and bounds of Config, from the settings package, which the
// server's configuration checks its flags with without linking this one.
const (
	DefaultImage      = settings.DefaultImage
	DefaultFetchImage = settings.DefaultFetchImage
	DefaultCPU        = settings.DefaultCPU
	DefaultMemory     = settings.DefaultMemory
	DefaultTimeout    = settings.DefaultTimeout
	MaxTimeout        = settings.MaxTimeout
	MinCPU            = settings.MinCPU
	MinMemory         = settings.MinMemory
	// defaultPoll is how often a running build's Job is read.
	defaultPoll = 3 * time.Second
)

// dockerfileRuntime is a provider the builder can build: one with an image
// layout and a Dockerfile install step.
type dockerfileRuntime interface {
	runtime.Provider
	runtime.ImageRuntime
	runtime.DockerfileRuntime
}

// Runtimes looks up runtime providers; *runtime.Registry implements it.
type Runtimes interface {
	Get(name string) (runtime.Provider, error)
}

// Blobs opens uploaded code by its SHA-256; storage.Blobs implements it.
type Blobs = unzip.Blobs

// Config configures the kaniko builder. Check reports what is wrong with
// it in the terms of its fields' documentation.
type Config struct {
	// Namespace runs the build Jobs; required. Its pods need the
	// "baseline" Pod Security profile (see MakeBuildJob).
	Namespace string
	// Repository receives the images, e.g. "registry.example.com/sless/functions";
	// required. Images are tagged there by what they are made of.
	Repository string
	// BaseImages maps a runtime to its base image. A runtime not in it uses
	// its provider's BaseImage in the registry of Repository, as the crane
	// builder does.
	BaseImages map[string]string
	// Image is kaniko's executor image, with a version tag or a digest
	// (never latest). Default DefaultImage.
	Image string
	// FetchImage is an image with curl on its PATH, which downloads the
	// build context. Default DefaultFetchImage.
	FetchImage string
	// RegistrySecret is a Secret in Namespace of type
	// kubernetes.io/dockerconfigjson (an image pull secret) with the
	// credentials kaniko pushes and pulls base images with. Default none:
	// kaniko uses the registries anonymously.
	RegistrySecret string
	// Insecure lets kaniko use plain HTTP with the registries.
	Insecure bool
	// Platform is the images' platform, "linux/amd64" (default) or
	// "linux/arm64": the build runs on a node of it.
	Platform string
	// CPU is the kaniko container's CPU request, default DefaultCPU;
	// Memory its memory request and limit, default DefaultMemory.
	CPU, Memory string
	// Limits bound the uploads the builder extracts.
	Limits safezip.Limits
	// Timeout bounds one build, from its Job's creation. Default
	// DefaultTimeout, at most MaxTimeout.
	Timeout time.Duration
	// TempDir is where build contexts are made; default os.TempDir().
	TempDir string
	// Poll is how often a running build's Job is read; default 3s.
	Poll time.Duration

	cpu, memory resource.Quantity
}

// withDefaults returns c with its zero fields set to their defaults and
// checked.
func (c Config) withDefaults() (Config, error) {
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if c.FetchImage == "" {
		c.FetchImage = DefaultFetchImage
	}
	if c.Platform == "" {
		c.Platform = "linux/amd64"
	}
	if c.CPU == "" {
		c.CPU = DefaultCPU
	}
	if c.Memory == "" {
		c.Memory = DefaultMemory
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.TempDir == "" {
		c.TempDir = os.TempDir()
	}
	if c.Poll <= 0 {
		c.Poll = defaultPoll
	}
	if err := c.Check(); err != nil {
		return Config{}, err
	}
	c.cpu, c.memory = resource.MustParse(c.CPU), resource.MustParse(c.Memory)
	return c, nil
}

// Check reports the first invalid field of c (its defaults applied).
func (c Config) Check() error {
	if errs := k8svalidation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
		return fmt.Errorf("namespace of the builds %q: %s", c.Namespace, strings.Join(errs, "; "))
	}
	if _, err := name.NewRepository(c.Repository); err != nil || c.Repository == "" {
		return fmt.Errorf("image repository %q: want registry/path, e.g. registry.example.com/sless/functions", c.Repository)
	}
	if err := settings.CheckImage(c.Image); err != nil {
		return fmt.Errorf("kaniko image: %w", err)
	}
	if err := settings.CheckImage(c.FetchImage); err != nil {
		return fmt.Errorf("image of the build context's download: %w", err)
	}
	for rt, ref := range c.BaseImages {
		if _, err := name.ParseReference(ref); err != nil {
			return fmt.Errorf("base image %q of runtime %s: %w", ref, rt, err)
		}
	}
	if c.RegistrySecret != "" {
		if errs := k8svalidation.IsDNS1123Subdomain(c.RegistrySecret); len(errs) > 0 {
			return fmt.Errorf("registry secret %q: %s", c.RegistrySecret, strings.Join(errs, "; "))
		}
	}
	if c.Platform != "linux/amd64" && c.Platform != "linux/arm64" {
		return fmt.Errorf("image platform %q: want linux/amd64 or linux/arm64", c.Platform)
	}
	if err := settings.CheckQuantity(c.CPU, MinCPU); err != nil {
		return fmt.Errorf("kaniko CPU: %w", err)
	}
	if err := settings.CheckQuantity(c.Memory, MinMemory); err != nil {
		return fmt.Errorf("kaniko memory: %w", err)
	}
	if c.Timeout <= 0 || c.Timeout > MaxTimeout {
		return fmt.Errorf("build timeout %s: want more than 0 and at most %s", c.Timeout, MaxTimeout)
	}
	return nil
}

// Builder implements build.Builder with kaniko Jobs. Builds run in the
// background (jobs.Jobs), which Start and Stop come from; stopping leaves
// the Jobs running, and the next start's builds take them up.
//
// What it must be allowed to do in Config.Namespace: get, list, create and
// delete Jobs; list Pods.
type Builder struct {
	*jobs.Jobs
	cfg      Config
	kube     client.Client
	contexts Contexts
	blobs    Blobs
	runtimes Runtimes
	log      *slog.Logger
	repo     name.Repository
	// functions serializes the builds and the Cancel of one function, so
	// that a superseded build has stopped creating its Job before the next
	// one deletes the function's other Jobs.
	functions keylock.Map[string]
}

var _ build.Builder = (*Builder)(nil)

// New returns a stopped builder whose Jobs kube manages (its scheme must
// know the core and batch types, as client-go's does), with build contexts
// in contexts and uploads from blobs. It contacts no server.
func New(c Config, kube client.Client, contexts Contexts, blobs Blobs, runtimes Runtimes, log *slog.Logger) (*Builder, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("kaniko builder: %w", err)
	}
	if err := os.MkdirAll(c.TempDir, 0o700); err != nil {
		return nil, fmt.Errorf("kaniko builder: the directory of build contexts: %w", err)
	}
	repo, _ := name.NewRepository(c.Repository) // Check parsed it
	b := &Builder{cfg: c, kube: kube, contexts: contexts, blobs: blobs, runtimes: runtimes, log: log, repo: repo}
	b.Jobs = jobs.New(b.run, log)
	return b, nil
}

// Cancel implements build.Builder: it stops the function's build and
// deletes its Jobs and build contexts, whichever server created them.
func (b *Builder) Cancel(ctx context.Context, namespace, function string) error {
	if err := b.Jobs.Cancel(ctx, namespace, function); err != nil {
		return err
	}
	defer b.functions.Lock(namespace + "/" + function)()
	return b.deleteJobs(ctx, namespace, function, "")
}

// run is the build of req: it starts its Job unless it exists and follows
// it to its end.
func (b *Builder) run(ctx context.Context, req build.Request) (build.Result, error) {
	defer b.functions.Lock(req.Namespace + "/" + req.Function)()
	rp, err := b.runtimes.Get(req.Runtime)
	if err != nil {
		return build.Result{}, &build.Error{Msg: err.Error(), Err: err}
	}
	p, ok := rp.(dockerfileRuntime)
	if !ok {
		return build.Result{}, &build.Error{Msg: fmt.Sprintf("runtime %s has no image layout: the kaniko builder cannot build it", req.Runtime)}
	}
	if req.Handler == "" {
		req.Handler = p.DefaultHandler()
	}
	name := jobName(req)
	if err := b.deleteJobs(ctx, req.Namespace, req.Function, name); err != nil {
		return build.Result{}, err
	}
	job := &batchv1.Job{}
	err = b.kube.Get(ctx, client.ObjectKey{Namespace: b.cfg.Namespace, Name: name}, job)
	switch {
	case apierrors.IsNotFound(err):
		if job, err = b.start(ctx, p, req, name); err != nil {
			return build.Result{}, err
		}
	case err != nil:
		return build.Result{}, fmt.Errorf("reading build Job %s: %w", name, err)
	case job.Annotations[AnnotationKey] != req.Key():
		return build.Result{}, fmt.Errorf("build Job %s is of another build (key %s)", name, job.Annotations[AnnotationKey])
	default:
		b.log.InfoContext(ctx, "found build job", "namespace", req.Namespace, "function", req.Function, "job", name)
	}
	return b.follow(ctx, job, p.ImageLayout().DependencyFiles[0])
}

// start makes req's build context, stores it and creates its Job (or
// returns the Job another server created meanwhile).
func (b *Builder) start(ctx context.Context, p dockerfileRuntime, req build.Request, name string) (*batchv1.Job, error) {
	tmp, err := os.MkdirTemp(b.cfg.TempDir, "kaniko-")
	if err != nil {
		return nil, fmt.Errorf("creating a build directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	code := filepath.Join(tmp, "code")
	if err := os.Mkdir(code, 0o755); err != nil {
		return nil, fmt.Errorf("creating a build directory: %w", err)
	}
	if err := unzip.Code(ctx, b.blobs, req.CodeSHA256, code, filepath.Join(tmp, "code.zip"), b.cfg.Limits); err != nil {
		return nil, err
	}
	if err := build.CheckHandler(p, req.Handler, build.DirCode(code)); err != nil {
		return nil, err
	}
	install := installCommand(code, p)
	base := b.baseImage(p)
	wrapperName, wrapper := p.Wrapper()
	f, err := os.Create(filepath.Join(tmp, "context.tar.gz"))
	if err != nil {
		return nil, fmt.Errorf("creating the build context: %w", err)
	}
	defer f.Close()
	if err := writeContext(f, Dockerfile(base, p.ImageLayout(), req, install), wrapperName, wrapper, code); err != nil {
		if _, ok := build.AsError(err); ok {
			return nil, err
		}
		return nil, fmt.Errorf("writing the build context: %w", err)
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		return nil, fmt.Errorf("rewinding the build context: %w", err)
	}
	key := contextKey(req)
	if err := b.contexts.Put(ctx, key, f, size); err != nil {
		return nil, err
	}
	url, err := b.contexts.URL(ctx, key, b.cfg.Timeout)
	if err != nil {
		return nil, err
	}
	job := MakeBuildJob(b.cfg, BuildJob{Name: name, Request: req, Image: b.image(req, base),
		ContextKey: key, ContextURL: url, ContextBytes: size})
	err = b.kube.Create(ctx, job)
	if apierrors.IsAlreadyExists(err) {
		err = b.kube.Get(ctx, client.ObjectKeyFromObject(job), job)
	}
	if err != nil {
		return nil, fmt.Errorf("creating build Job %s in namespace %s: %w", name, b.cfg.Namespace, err)
	}
	b.log.InfoContext(ctx, "started build job", "namespace", req.Namespace, "function", req.Function,
		"job", name, "image", job.Annotations[AnnotationImage], "install", install != "")
	return job, nil
}

// follow reads job's state every Config.Poll until it ends, it runs past
// the build timeout, or ctx ends; then it deletes the Job and its build
// context. Failing reads are retried until the timeout.
func (b *Builder) follow(ctx context.Context, job *batchv1.Job, depFile string) (build.Result, error) {
	deadline := job.CreationTimestamp.Add(b.cfg.Timeout)
	var st state
	var waiting string
	for {
		cur, err := b.read(ctx, job, depFile)
		switch {
		case apierrors.IsNotFound(err):
			return build.Result{}, fmt.Errorf("build Job %s was deleted before it ended", job.Name)
		case err != nil:
			b.log.WarnContext(ctx, "reading build job", "job", job.Name, "error", err)
		default:
			st = cur
		}
		if st.done {
			b.remove(ctx, job)
			return st.result, st.err
		}
		if st.waiting != waiting && st.waiting != "" {
			b.log.WarnContext(ctx, "build pod waits", "job", job.Name, "reason", st.waiting)
		}
		waiting = st.waiting
		if st.timedOut || !time.Now().Before(deadline) {
			b.remove(ctx, job)
			if !st.started {
				return build.Result{}, fmt.Errorf("build Job %s did not start within the build timeout %s (%s)",
					job.Name, b.cfg.Timeout, cmp.Or(st.waiting, "no pod waiting for a reason"))
			}
			return build.Result{}, &build.Error{Msg: fmt.Sprintf("the build took longer than %s", b.cfg.Timeout)}
		}
		t := time.NewTimer(min(b.cfg.Poll, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return build.Result{}, context.Cause(ctx)
		case <-t.C:
		}
	}
}

// read returns the state of job, read again with its pods.
func (b *Builder) read(ctx context.Context, job *batchv1.Job, depFile string) (state, error) {
	if err := b.kube.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
		return state{}, err
	}
	sel, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
	if err != nil {
		return state{}, fmt.Errorf("the pod selector of build Job %s: %w", job.Name, err)
	}
	var pods corev1.PodList
	if err := b.kube.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return state{}, fmt.Errorf("listing the pods of build Job %s: %w", job.Name, err)
	}
	return jobState(job, pods.Items, depFile), nil
}

// remove deletes the ended job and its build context. A failure leaves
// them to the Job's TTL and to the next Cancel.
func (b *Builder) remove(ctx context.Context, job *batchv1.Job) {
	// In the background: deleting the Job is what matters, its pods go
	// with it.
	err := b.kube.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		b.log.WarnContext(ctx, "deleting build job", "job", job.Name, "error", err)
	}
	if key := job.Annotations[AnnotationContext]; key != "" {
		if err := b.contexts.Delete(ctx, key); err != nil {
			b.log.WarnContext(ctx, "deleting build context", "job", job.Name, "error", err)
		}
	}
}

// deleteJobs deletes the function's Jobs and their build contexts, but for
// the Job named keep.
func (b *Builder) deleteJobs(ctx context.Context, namespace, function, keep string) error {
	var list batchv1.JobList
	err := b.kube.List(ctx, &list, client.InNamespace(b.cfg.Namespace), client.MatchingLabels(functionLabels(namespace, function)))
	if err != nil {
		return fmt.Errorf("listing the build Jobs of %s/%s: %w", namespace, function, err)
	}
	var errs []error
	for i := range list.Items {
		job := &list.Items[i]
		if job.Name == keep {
			continue
		}
		err := b.kube.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting build Job %s: %w", job.Name, err))
			continue
		}
		b.log.InfoContext(ctx, "deleted build job", "namespace", namespace, "function", function, "job", job.Name)
	}
	if keep == "" {
		// Contexts whose Jobs were never created or are gone.
		errs = append(errs, b.contexts.Delete(ctx, contextPrefix(namespace, function)))
	} else {
		for i := range list.Items {
			if key := list.Items[i].Annotations[AnnotationContext]; key != "" && list.Items[i].Name != keep {
				errs = append(errs, b.contexts.Delete(ctx, key))
			}
		}
	}
	return errors.Join(errs...)
}

// installCommand is the Dockerfile's install step for the code at dir, ""
// when it needs none.
func installCommand(dir string, p dockerfileRuntime) string {
	if !imagecode.NeedsInstall(dir, p.ImageLayout()) {
		return ""
	}
	return p.DockerfileInstall(func(name string) bool {
		_, err := os.Lstat(filepath.Join(dir, name))
		return err == nil
	})
}

// baseImage is the reference of p's base image.
func (b *Builder) baseImage(p runtime.Provider) string {
	if ref := b.cfg.BaseImages[p.Name()]; ref != "" {
		return ref
	}
	return b.repo.RegistryStr() + "/" + p.BaseImage()
}

// image is where req's image is pushed: Repository, tagged by what the
// image is made of.
func (b *Builder) image(req build.Request, base string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s", layoutVersion, req.Key(), base, b.cfg.Platform)
	return b.repo.Tag("sless-" + hex.EncodeToString(h.Sum(nil))[:40]).String()
}

// contextPrefix is the start of the keys of a function's build contexts.
func contextPrefix(namespace, function string) string {
	return namespace + "/" + function + "/"
}

// contextKey is the key of req's build context.
func contextKey(req build.Request) string {
	return contextPrefix(req.Namespace, req.Function) + req.Key() + ".tar.gz"
}
