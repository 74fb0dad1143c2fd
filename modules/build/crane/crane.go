// Package crane is the image builder: it turns a function's upload into an
// OCI image in a registry by appending layers to the runtime's base image
// with go-containerregistry, with no Dockerfile, build container or daemon.
// An image is the base image, a dependency layer when the code declares
// dependencies (installed on the server from binary packages, cached by the
// hash of the dependency files), and a code layer, laid out as
// runtime.ImageLayout says. Layers and image config are deterministic, so
// the same code on the same base image gives the same digest anywhere, and
// an image already in the registry is not pushed again.
package crane

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"sless.kube5s.ru/sless/internal/keylock"
	"sless.kube5s.ru/sless/internal/tail"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/imagecode"
	"sless.kube5s.ru/sless/modules/build/jobs"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/build/unzip"
	"sless.kube5s.ru/sless/modules/runtime"
)

// layoutVersion changes when what the builder puts into an image changes,
// so that images of an older builder are not reused.
const layoutVersion = "sless-crane/v1"

// Runtimes looks up runtime providers; *runtime.Registry implements it.
type Runtimes interface {
	Get(name string) (runtime.Provider, error)
}

// Blobs opens uploaded code by its SHA-256; storage.Blobs implements it.
type Blobs = unzip.Blobs

// Config configures the crane builder.
type Config struct {
	// Repository receives the images, e.g. "registry.example.com/sless/functions";
	// required. Images are tagged there by build key, and every function
	// with the same code shares its image.
	Repository string
	// BaseImages maps a runtime to its base image. A runtime not in it uses
	// its provider's BaseImage (e.g. "sless-runtime-python3.11:v0.1.0") in
	// the registry of Repository.
	BaseImages map[string]string
	// Insecure allows plain HTTP to registries other than loopback ones
	// (which always may use it).
	Insecure bool
	// DockerConfig is a docker config.json (an image pull secret's
	// .dockerconfigjson) with the registries' credentials; "" uses none
	// unless Username is set.
	DockerConfig string
	// Username and Password authenticate to every registry, in place of
	// DockerConfig.
	Username, Password string
	// Platform is the images' OS and architecture, "linux/amd64" (default)
	// or "linux/arm64": the base image's variant picked from a multi-platform
	// base, and the platform dependencies are installed for.
	Platform string
	// CacheDir keeps the dependency layers and builds in progress; required.
	// A dependency layer unused for 30 days is removed at the next New.
	CacheDir string
	// InstallEnv ("K=V") is added to the environment of the dependency
	// tools: PIP_INDEX_URL, npm_config_registry, proxies.
	InstallEnv []string
	// Limits bound the archives the builder extracts.
	Limits safezip.Limits
	// Timeout bounds one build. Default 10m.
	Timeout time.Duration
}

// Builder implements build.Builder with images in Config.Repository. Builds
// run in the background (jobs.Jobs), which Start and Stop come from; Image
// runs one in the foreground.
type Builder struct {
	*jobs.Jobs
	cfg      Config
	blobs    Blobs
	runtimes Runtimes
	log      *slog.Logger
	repo     name.Repository
	nameOpts []name.Option
	remote   []remote.Option
	// locks serializes the builds of one image and of one dependency layer.
	locks keylock.Map[string]

	mu    sync.Mutex
	bases map[string]*baseImage // by reference
}

// baseImage is a resolved base image.
type baseImage struct {
	ref    string // as configured
	img    v1.Image
	digest v1.Hash
	config v1.Config
	// layerType is the media type of the layers appended to it.
	layerType types.MediaType
}

// New returns a stopped builder.
func New(c Config, blobs Blobs, runtimes Runtimes, log *slog.Logger) (*Builder, error) {
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.Platform == "" {
		c.Platform = "linux/amd64"
	}
	platform, err := v1.ParsePlatform(c.Platform)
	if err != nil || platform.OS != "linux" || (platform.Architecture != "amd64" && platform.Architecture != "arm64") {
		return nil, fmt.Errorf("image platform %q: want linux/amd64 or linux/arm64", c.Platform)
	}
	var nameOpts []name.Option
	if c.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	repo, err := name.NewRepository(c.Repository, nameOpts...)
	if err != nil || c.Repository == "" {
		return nil, fmt.Errorf("image repository %q: want registry/path, e.g. registry.example.com/sless/functions", c.Repository)
	}
	if c.CacheDir == "" {
		return nil, errors.New("the image builder needs a cache directory")
	}
	if err := os.MkdirAll(filepath.Join(c.CacheDir, "deps"), 0o755); err != nil {
		return nil, fmt.Errorf("creating the image build cache: %w", err)
	}
	stale, _ := filepath.Glob(filepath.Join(c.CacheDir, ".tmp-*"))
	for _, s := range stale {
		if err := os.RemoveAll(s); err != nil {
			return nil, fmt.Errorf("removing an interrupted build: %w", err)
		}
	}
	if err := pruneDeps(filepath.Join(c.CacheDir, "deps"), time.Now().Add(-depsCacheTTL)); err != nil {
		return nil, err
	}
	var auth remote.Option
	switch {
	case c.Username != "":
		auth = remote.WithAuth(&authn.Basic{Username: c.Username, Password: c.Password})
	case c.DockerConfig != "":
		if _, err := os.Stat(c.DockerConfig); err != nil {
			return nil, fmt.Errorf("the registry credentials: %w", err)
		}
		auth = remote.WithAuthFromKeychain(configKeychain{path: c.DockerConfig})
	default:
		auth = remote.WithAuth(authn.Anonymous)
	}
	b := &Builder{cfg: c, blobs: blobs, runtimes: runtimes, log: log, repo: repo, nameOpts: nameOpts,
		remote: []remote.Option{auth, remote.WithPlatform(*platform),
			remote.WithUserAgent("sless")},
		bases: map[string]*baseImage{}}
	b.Jobs = jobs.New(b.Image, log)
	return b, nil
}

var _ build.Builder = (*Builder)(nil)

// Image builds and pushes req's image, or finds it in the registry
// (Result.Reused), and returns its digest-pinned reference as the artifact.
// Failures of the code or its dependencies are *build.Error; failures of the
// registry say what was refused.
func (b *Builder) Image(ctx context.Context, req build.Request) (build.Result, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, b.cfg.Timeout, fmt.Errorf("the build took longer than %s", b.cfg.Timeout))
	defer cancel()
	p, err := b.runtimes.Get(req.Runtime)
	if err != nil {
		return build.Result{}, &build.Error{Msg: err.Error(), Err: err}
	}
	ir, ok := p.(runtime.ImageRuntime)
	if !ok {
		return build.Result{}, &build.Error{Msg: fmt.Sprintf("runtime %s has no image layout: the image builder cannot build it", req.Runtime)}
	}
	if req.Handler == "" {
		req.Handler = p.DefaultHandler()
	}
	base, err := b.base(ctx, p)
	if err != nil {
		return build.Result{}, err
	}
	tag := b.repo.Tag(b.tag(req, base))
	defer b.locks.Lock(tag.String())()
	desc, err := remote.Head(tag, b.opts(ctx)...)
	if err == nil {
		return build.Result{Artifact: b.repo.Digest(desc.Digest.String()).String(), Reused: true}, nil
	}
	if !isNotFound(err) {
		return build.Result{}, registryError("looking up image "+tag.String(), err)
	}

	tmp, err := os.MkdirTemp(b.cfg.CacheDir, ".tmp-")
	if err != nil {
		return build.Result{}, fmt.Errorf("creating a build directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	code := filepath.Join(tmp, "code")
	if err := os.Mkdir(code, 0o755); err != nil {
		return build.Result{}, fmt.Errorf("creating a build directory: %w", err)
	}
	if err := unzip.Code(ctx, b.blobs, req.CodeSHA256, code, filepath.Join(tmp, "code.zip"), b.cfg.Limits); err != nil {
		return build.Result{}, err
	}
	if err := build.CheckHandler(p, req.Handler, build.DirCode(code)); err != nil {
		return build.Result{}, err
	}
	layout := ir.ImageLayout()
	log := &tail.Buffer{Max: build.LogLimit}
	var adds []mutate.Addendum
	if imagecode.NeedsInstall(code, layout) {
		l, err := b.depsLayer(ctx, ir, layout, code, base.layerType, log)
		if err != nil {
			return build.Result{}, err
		}
		adds = append(adds, mutate.Addendum{Layer: l,
			History: v1.History{CreatedBy: "sless: dependencies from " + layout.DependencyFiles[0]}})
	}
	l, err := codeLayer(code, base.layerType)
	if err != nil {
		return build.Result{}, err
	}
	adds = append(adds, mutate.Addendum{Layer: l, History: v1.History{CreatedBy: "sless: code " + req.CodeSHA256}})
	img, err := b.image(base, adds, layout, req)
	if err != nil {
		return build.Result{}, err
	}
	b.log.InfoContext(ctx, "pushing image", "namespace", req.Namespace, "function", req.Function, "image", tag.String())
	if err := remote.Write(tag, img, b.opts(ctx)...); err != nil {
		return build.Result{}, registryError("pushing image "+tag.String(), err)
	}
	digest, err := img.Digest()
	if err != nil {
		return build.Result{}, err
	}
	return build.Result{Artifact: b.repo.Digest(digest.String()).String(), Log: log.String()}, nil
}

// image is base with adds, configured to run the wrapper on req's code.
func (b *Builder) image(base *baseImage, adds []mutate.Addendum, layout runtime.ImageLayout, req build.Request) (v1.Image, error) {
	img, err := mutate.Append(base.img, adds...)
	if err != nil {
		return nil, err
	}
	cfg := base.config
	cfg.Entrypoint = layout.Entrypoint()
	cfg.Cmd = []string{"--handler", req.Handler}
	cfg.Env = mergeEnv(cfg.Env, layout.Env)
	cfg.User = runtime.ImageUser
	cfg.WorkingDir = runtime.ImageCodeDir
	cfg.ExposedPorts = map[string]struct{}{fmt.Sprintf("%d/tcp", runtime.ImagePort): {}}
	cfg.Labels = maps.Clone(cfg.Labels)
	if cfg.Labels == nil {
		cfg.Labels = map[string]string{}
	}
	cfg.Labels[imagecode.LabelRuntime] = req.Runtime
	cfg.Labels[imagecode.LabelHandler] = req.Handler
	cfg.Labels[imagecode.LabelCodeSHA256] = req.CodeSHA256
	if img, err = mutate.Config(img, cfg); err != nil {
		return nil, err
	}
	return mutate.Annotations(img, map[string]string{
		"org.opencontainers.image.base.name":   base.ref,
		"org.opencontainers.image.base.digest": base.digest.String(),
	}).(v1.Image), nil
}

// mergeEnv is base with the variables of over set.
func mergeEnv(base, over []string) []string {
	env := slices.Clone(base)
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		env = append(env, kv)
	}
	return env
}

// tag names req's image: what it is made of, hashed. The handler check
// happened when the image was made, for the same code and handler.
func (b *Builder) tag(req build.Request, base *baseImage) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s", layoutVersion, req.Key(), base.digest, b.cfg.Platform)
	for _, kv := range b.cfg.InstallEnv {
		fmt.Fprintf(h, "\x00%s", kv)
	}
	return "sless-" + hex.EncodeToString(h.Sum(nil))[:40]
}

// base resolves the base image of p once; a failure is tried again by the
// next build.
func (b *Builder) base(ctx context.Context, p runtime.Provider) (*baseImage, error) {
	ref := b.cfg.BaseImages[p.Name()]
	if ref == "" {
		ref = b.repo.RegistryStr() + "/" + p.BaseImage()
	}
	defer b.locks.Lock("base " + ref)()
	b.mu.Lock()
	bi := b.bases[ref]
	b.mu.Unlock()
	if bi != nil {
		return bi, nil
	}
	r, err := name.ParseReference(ref, b.nameOpts...)
	if err != nil {
		return nil, fmt.Errorf("base image %q of runtime %s: %w", ref, p.Name(), err)
	}
	img, err := remote.Image(r, b.opts(ctx)...)
	if isNotFound(err) {
		return nil, fmt.Errorf("base image %s of runtime %s is not in the registry: push it (runtimes/%s/Dockerfile) or configure another one",
			ref, p.Name(), p.Name())
	}
	if err != nil {
		return nil, registryError(fmt.Sprintf("resolving base image %s of runtime %s", ref, p.Name()), err)
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, registryError("reading the config of base image "+ref, err)
	}
	mt, err := img.MediaType()
	if err != nil {
		return nil, err
	}
	bi = &baseImage{ref: ref, img: img, digest: digest, config: cf.Config, layerType: types.DockerLayer}
	if mt == types.OCIManifestSchema1 {
		bi.layerType = types.OCILayer
	}
	b.log.InfoContext(ctx, "resolved base image", "runtime", p.Name(), "image", ref, "digest", digest.String())
	b.mu.Lock()
	b.bases[ref] = bi
	b.mu.Unlock()
	return bi, nil
}

func (b *Builder) opts(ctx context.Context) []remote.Option {
	return append(slices.Clone(b.remote), remote.WithContext(ctx))
}

// codeLayer is the code at dir as the layer of runtime.ImageCodeDir, in
// memory.
func codeLayer(dir string, mediaType types.MediaType) (*layer, error) {
	var buf bytes.Buffer
	info, err := writeLayer(&buf, dir, strings.TrimPrefix(runtime.ImageCodeDir, "/"))
	if err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return &layer{info: info, mediaType: mediaType, open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}}, nil
}

// isNotFound reports whether err is a registry's 404.
func isNotFound(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}

// registryError says what the registry refused while doing what.
func registryError(doing string, err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusUnauthorized:
			return fmt.Errorf("%s: the registry refused the credentials (check the docker config file or the username and password): %w", doing, err)
		case http.StatusForbidden:
			return fmt.Errorf("%s: the registry denied access: %w", doing, err)
		}
	}
	return fmt.Errorf("%s: %w", doing, err)
}
