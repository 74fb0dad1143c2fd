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
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"sless.kube5s.ru/sless/internal/durable"
	"sless.kube5s.ru/sless/internal/keylock"
	"sless.kube5s.ru/sless/internal/tail"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/jobs"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/build/unzip"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/storage"
)

// Runtimes looks up runtime providers; *runtime.Registry implements it.
type Runtimes interface {
	Get(name string) (runtime.Provider, error)
}

// Config configures the local builder.
type Config struct {
	// Dir holds the artifacts.
	Dir string
	// Limits bound the archives the builder extracts.
	Limits safezip.Limits
	// Timeout bounds one build. Default 10m.
	Timeout time.Duration
	// Installs is the most dependency installs that run at once; the builds
	// beyond it wait for their turn (extracting code needs no turn). Default
	// 4.
	Installs int
}

func (c *Config) defaults() {
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.Installs <= 0 {
		c.Installs = 4
	}
}

// Builder implements build.Builder with directories under Dir:
// Dir/<id> is the artifact of one (runtime, code) pair, where id is a hash of
// both, so functions with the same code share it; Dir/.tmp-* are builds and
// removals in progress. Builds run in the background (jobs.Jobs); Start and
// Stop come from there too.
type Builder struct {
	*jobs.Jobs
	cfg      Config
	blobs    storage.Blobs
	runtimes Runtimes
	confine  runtime.Confiner
	log      *slog.Logger
	// locks serializes the builds of one artifact.
	locks keylock.Map[string]
	// installs holds a token per dependency install running.
	installs chan struct{}
	// dirSync fsyncs Config.Dir once for the builds that publish at once.
	dirSync *durable.DirSyncer
}

// New returns a stopped builder that keeps artifacts in c.Dir, removing
// what builds and removals interrupted by a crash left behind. Dependency
// installs run confined by confine; nil runs them as the server's user.
func New(c Config, blobs storage.Blobs, runtimes Runtimes, confine runtime.Confiner, log *slog.Logger) (*Builder, error) {
	c.defaults()
	if err := durable.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the artifact directory: %w", err)
	}
	stale, err := filepath.Glob(filepath.Join(c.Dir, ".tmp-*"))
	if err != nil {
		return nil, err
	}
	for _, s := range stale {
		if err := os.RemoveAll(s); err != nil {
			return nil, fmt.Errorf("removing an interrupted build: %w", err)
		}
	}
	c.Dir = filepath.Clean(c.Dir)
	b := &Builder{cfg: c, blobs: blobs, runtimes: runtimes, confine: confine, log: log,
		installs: make(chan struct{}, c.Installs), dirSync: durable.NewDirSyncer(c.Dir)}
	b.Jobs = jobs.New(b.buildNow, log)
	return b, nil
}

var _ build.Builder = (*Builder)(nil)

// buildNow builds req's artifact, or finds it built.
func (b *Builder) buildNow(ctx context.Context, req build.Request) (build.Result, error) {
	p, err := b.runtimes.Get(req.Runtime)
	if err != nil {
		return build.Result{}, &build.Error{Msg: err.Error(), Err: err}
	}
	id := artifactID(req)
	defer b.locks.Lock(id)()

	final := filepath.Join(b.cfg.Dir, id)
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
	if err := build.CheckHandler(p, req.Handler, build.DirCode(final)); err != nil {
		return build.Result{}, err
	}
	return res, nil
}

var _ build.Pruner = (*Builder)(nil)

// Artifacts implements build.Pruner.
func (b *Builder) Artifacts(context.Context) ([]string, error) {
	entries, err := os.ReadDir(b.cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("listing the artifacts: %w", err)
	}
	var artifacts []string
	for _, e := range entries {
		if e.IsDir() && isArtifactID(e.Name()) {
			artifacts = append(artifacts, filepath.Join(b.cfg.Dir, e.Name()))
		}
	}
	return artifacts, nil
}

// RemoveUnused implements build.Pruner. A Build returning an artifact sets
// its modification time; the artifact is moved out of the way under the
// lock that Build holds, then deleted.
func (b *Builder) RemoveUnused(_ context.Context, artifact string, since time.Time) (bool, error) {
	id := filepath.Base(artifact)
	if filepath.Dir(artifact) != b.cfg.Dir || !isArtifactID(id) {
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
	artifact := filepath.Join(b.cfg.Dir, id)
	st, err := os.Stat(artifact)
	if errors.Is(err, os.ErrNotExist) || (err == nil && !st.ModTime().Before(since)) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	trash, err := os.MkdirTemp(b.cfg.Dir, ".tmp-removed-")
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
// directory that is renamed to final only when everything succeeded and is
// on disk (fsynced, file by file), so that an artifact survives a power
// cut whole or not at all. It
// takes at most Config.Timeout, not counting the wait for its turn to
// install.
func (b *Builder) build(jobCtx context.Context, p runtime.Provider, req build.Request, final string) (build.Result, error) {
	start := time.Now()
	ctx, cancel := b.timed(jobCtx, start)
	defer cancel()
	// The code is extracted where it is built and renamed to final: no
	// directory is left to remove after a successful build (removing one per
	// deploy made ext4 look past recently deleted inodes on every new file).
	code, err := os.MkdirTemp(b.cfg.Dir, ".tmp-")
	if err != nil {
		return build.Result{}, fmt.Errorf("creating a build directory: %w", err)
	}
	published := false
	defer func() {
		if !published {
			os.RemoveAll(code)
		}
	}()
	if err := os.Chmod(code, 0o755); err != nil {
		return build.Result{}, fmt.Errorf("creating a build directory: %w", err)
	}
	if err := unzip.Code(ctx, b.blobs, req.CodeSHA256, code, code+".zip", b.cfg.Limits); err != nil {
		return build.Result{}, err
	}
	log := &tail.Buffer{Max: build.LogLimit}
	if inst, ok := p.(runtime.DependencyInstaller); ok {
		if _, err := os.Stat(filepath.Join(code, inst.DependencyFile())); err == nil {
			b.log.InfoContext(ctx, "installing dependencies", "namespace", req.Namespace, "function", req.Function, "file", inst.DependencyFile())
			waitStart := time.Now()
			release, err := b.installTurn(jobCtx)
			if err != nil {
				return build.Result{}, fmt.Errorf("waiting for a turn to install dependencies: %w", context.Cause(jobCtx))
			}
			ctx, cancel := b.timed(jobCtx, start.Add(time.Since(waitStart)))
			defer cancel()
			err = inst.InstallDependencies(b.confined(ctx), code, log)
			release()
			if err != nil {
				msg := fmt.Sprintf("installing dependencies from %s failed: %v", inst.DependencyFile(), err)
				if ctx.Err() != nil {
					msg = fmt.Sprintf("the build was stopped while installing dependencies from %s: %v", inst.DependencyFile(), context.Cause(ctx))
				}
				return build.Result{}, &build.Error{Msg: msg, Log: log.String(), Err: err}
			}
		}
	}
	if pc, ok := p.(runtime.Precompiler); ok {
		// The code runs without what Precompile adds, only slower to start.
		if err := pc.Precompile(b.confined(ctx), code); err != nil && ctx.Err() == nil {
			b.log.WarnContext(ctx, "compiling the code ahead failed; its instances compile it when they start",
				"namespace", req.Namespace, "function", req.Function, "error", err)
		}
	}
	// What the rename makes visible must be on disk first, and the rename
	// itself after it: else a power cut leaves a Ready function whose
	// artifact has empty or missing files, or no artifact.
	if err := durable.SyncTree(code); err != nil {
		return build.Result{}, fmt.Errorf("publishing the artifact: %w", err)
	}
	if err := os.Rename(code, final); err != nil {
		return build.Result{}, fmt.Errorf("publishing the artifact: %w", err)
	}
	published = true
	if err := b.dirSync.Sync(); err != nil {
		return build.Result{}, fmt.Errorf("publishing the artifact: %w", err)
	}
	return build.Result{Artifact: final, Log: log.String()}, nil
}

// confined returns ctx carrying the builder's Confiner, if it has one, for
// the tools a runtime runs on the code.
func (b *Builder) confined(ctx context.Context) context.Context {
	if b.confine == nil {
		return ctx
	}
	return runtime.WithConfiner(ctx, b.confine)
}

// timed returns ctx ending Config.Timeout after from.
func (b *Builder) timed(ctx context.Context, from time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadlineCause(ctx, from.Add(b.cfg.Timeout), fmt.Errorf("the build took longer than %s", b.cfg.Timeout))
}

// installTurn waits until fewer than Config.Installs dependency installs
// run, or ctx ends; release ends the turn.
func (b *Builder) installTurn(ctx context.Context) (release func(), err error) {
	select {
	case b.installs <- struct{}{}:
		return func() { <-b.installs }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
