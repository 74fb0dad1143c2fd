// Package local is the embedded mode's builder: it extracts the uploaded zip
// into a content-addressed artifact directory and installs the code's
// dependencies there with the runtime's tool.
package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"sless.kube5s.ru/sless/internal/keylock"
	"sless.kube5s.ru/sless/internal/tail"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/storage"
)

// Runtimes looks up runtime providers; *runtime.Registry implements it.
type Runtimes interface {
	Get(name string) (runtime.Provider, error)
}

// Builder implements build.Builder with directories under Dir:
// Dir/<id> is the artifact of one (runtime, code) pair, where id is a hash of
// both, so functions with the same code share it; Dir/.tmp-* are builds and
// removals in progress.
type Builder struct {
	dir      string
	blobs    storage.Blobs
	runtimes Runtimes
	limits   safezip.Limits
	confine  runtime.Confiner
	log      *slog.Logger
	// locks serializes the builds of one artifact.
	locks keylock.Map[string]
}

// New returns a builder that keeps artifacts in dir, removing what builds
// and removals interrupted by a crash left behind. Dependency installs run
// confined by confine; nil runs them as the server's user.
func New(dir string, blobs storage.Blobs, runtimes Runtimes, limits safezip.Limits, confine runtime.Confiner, log *slog.Logger) (*Builder, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the artifact directory: %w", err)
	}
	stale, err := filepath.Glob(filepath.Join(dir, ".tmp-*"))
	if err != nil {
		return nil, err
	}
	for _, s := range stale {
		if err := os.RemoveAll(s); err != nil {
			return nil, fmt.Errorf("removing an interrupted build: %w", err)
		}
	}
	return &Builder{dir: filepath.Clean(dir), blobs: blobs, runtimes: runtimes, limits: limits, confine: confine, log: log}, nil
}

var _ build.Builder = (*Builder)(nil)

// Build implements build.Builder.
func (b *Builder) Build(ctx context.Context, req build.Request) (build.Result, error) {
	p, err := b.runtimes.Get(req.Runtime)
	if err != nil {
		return build.Result{}, &build.Error{Msg: err.Error(), Err: err}
	}
	id := artifactID(req)
	defer b.locks.Lock(id)()

	final := filepath.Join(b.dir, id)
	res := build.Result{Artifact: final, Reused: true}
	if _, err := os.Stat(final); errors.Is(err, os.ErrNotExist) {
		res, err = b.build(ctx, p, req, final)
		if err != nil {
			return build.Result{}, err
		}
	} else if err != nil {
		return build.Result{}, fmt.Errorf("checking artifact %s: %w", id, err)
	}
	// The modification time tells RemoveUnused when it was last returned.
	if err := touch(final); err != nil {
		return build.Result{}, fmt.Errorf("marking artifact %s used: %w", id, err)
	}
	if err := build.CheckHandler(p, req.Handler, dirCode(final)); err != nil {
		return build.Result{}, err
	}
	return res, nil
}

var _ build.Pruner = (*Builder)(nil)

// Artifacts implements build.Pruner.
func (b *Builder) Artifacts(context.Context) ([]string, error) {
	entries, err := os.ReadDir(b.dir)
	if err != nil {
		return nil, fmt.Errorf("listing the artifacts: %w", err)
	}
	var artifacts []string
	for _, e := range entries {
		if e.IsDir() && isArtifactID(e.Name()) {
			artifacts = append(artifacts, filepath.Join(b.dir, e.Name()))
		}
	}
	return artifacts, nil
}

// RemoveUnused implements build.Pruner. A Build returning an artifact sets
// its modification time; the artifact is moved out of the way under the
// lock that Build holds, then deleted.
func (b *Builder) RemoveUnused(_ context.Context, artifact string, since time.Time) (bool, error) {
	id := filepath.Base(artifact)
	if filepath.Dir(artifact) != b.dir || !isArtifactID(id) {
		return false, fmt.Errorf("%q is not an artifact of this builder", artifact)
	}
	trash, err := b.detach(id, since)
	if trash == "" || err != nil {
		return false, err
	}
	if err := os.RemoveAll(trash); err != nil {
		return true, fmt.Errorf("removing artifact %s: %w", id, err)
	}
	return true, nil
}

// detach moves artifact id into a new trash directory unless it is gone or
// a Build returned it at or after since, and returns the trash directory
// ("" when it left the artifact). Its .tmp- prefix makes New remove it
// should the server stop before it is deleted.
func (b *Builder) detach(id string, since time.Time) (string, error) {
	defer b.locks.Lock(id)()
	artifact := filepath.Join(b.dir, id)
	st, err := os.Stat(artifact)
	if errors.Is(err, os.ErrNotExist) || (err == nil && !st.ModTime().Before(since)) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	trash, err := os.MkdirTemp(b.dir, ".tmp-removed-")
	if err == nil {
		err = os.Rename(artifact, filepath.Join(trash, id))
	}
	if err != nil {
		return "", fmt.Errorf("removing artifact %s: %w", id, err)
	}
	return trash, nil
}

func touch(path string) error {
	now := time.Now()
	return os.Chtimes(path, now, now)
}

// isArtifactID reports whether name is an artifactID.
func isArtifactID(name string) bool {
	if len(name) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(name)
	return err == nil
}

// artifactID hashes what the artifact depends on: the handler is checked on
// every build but does not change the artifact.
func artifactID(req build.Request) string {
	h := sha256.Sum256([]byte(req.Runtime + "\x00" + req.CodeSHA256))
	return hex.EncodeToString(h[:])
}

// build extracts the code and installs its dependencies in a temporary
// directory that is renamed to final only when everything succeeded.
func (b *Builder) build(ctx context.Context, p runtime.Provider, req build.Request, final string) (build.Result, error) {
	tmp, err := os.MkdirTemp(b.dir, ".tmp-")
	if err != nil {
		return build.Result{}, fmt.Errorf("creating a build directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	code := filepath.Join(tmp, "code")
	if err := os.Mkdir(code, 0o755); err != nil {
		return build.Result{}, err
	}
	if err := b.extract(ctx, req.CodeSHA256, filepath.Join(tmp, "code.zip"), code); err != nil {
		return build.Result{}, err
	}
	log := &tail.Buffer{Max: build.LogLimit}
	if inst, ok := p.(runtime.DependencyInstaller); ok {
		if _, err := os.Stat(filepath.Join(code, inst.DependencyFile())); err == nil {
			b.log.InfoContext(ctx, "installing dependencies", "namespace", req.Namespace, "function", req.Function, "file", inst.DependencyFile())
			ictx := ctx
			if b.confine != nil {
				ictx = runtime.WithConfiner(ctx, b.confine)
			}
			if err := inst.InstallDependencies(ictx, code, log); err != nil {
				msg := fmt.Sprintf("installing dependencies from %s failed: %v", inst.DependencyFile(), err)
				if ctx.Err() != nil {
					msg = fmt.Sprintf("the build was stopped while installing dependencies from %s: %v", inst.DependencyFile(), context.Cause(ctx))
				}
				return build.Result{}, &build.Error{Msg: msg, Log: log.String(), Err: err}
			}
		}
	}
	if err := os.Rename(code, final); err != nil {
		return build.Result{}, fmt.Errorf("publishing the artifact: %w", err)
	}
	return build.Result{Artifact: final, Log: log.String()}, nil
}

// extract copies the zip blob to a local file (zip needs random access) and
// unpacks it safely into dir.
func (b *Builder) extract(ctx context.Context, sha, zipPath, dir string) error {
	src, err := b.blobs.Open(ctx, sha)
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return &build.Error{Msg: fmt.Sprintf("the uploaded code %s is missing from the blob store; upload it again", sha), Err: err}
		}
		return fmt.Errorf("opening code %s: %w", sha, err)
	}
	defer src.Close()
	f, err := os.Create(zipPath)
	if err != nil {
		return err
	}
	defer f.Close()
	size, err := io.Copy(f, src)
	if err != nil {
		return fmt.Errorf("copying code %s: %w", sha, err)
	}
	err = safezip.Extract(f, size, dir, b.limits)
	if e, ok := errors.AsType[*safezip.Error](err); ok {
		return &build.Error{Msg: e.Error(), Err: err}
	}
	if err != nil {
		// The disk, not the code: the message names the server's paths.
		return fmt.Errorf("extracting code %s: %w", sha, err)
	}
	return nil
}

// dirCode is an extracted artifact as build.CheckHandler sees it.
type dirCode string

func (d dirCode) IsFile(name string) bool {
	st, err := os.Stat(filepath.Join(string(d), filepath.FromSlash(name)))
	return err == nil && st.Mode().IsRegular()
}

func (d dirCode) TopLevel() []string {
	entries, _ := os.ReadDir(string(d))
	var top []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			name += "/"
		}
		top = append(top, name)
	}
	return top
}
