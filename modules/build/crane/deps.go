package crane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/runtime"
)

// depsLayer returns the dependency layer of the code at dir: the one built
// before from the same dependency files, runtime and install settings, or a
// new one, installed and kept in CacheDir/deps.
func (b *Builder) depsLayer(ctx context.Context, ir runtime.ImageRuntime, l runtime.ImageLayout, dir string,
	mediaType types.MediaType, log io.Writer) (*layer, error) {
	files := map[string][]byte{}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s", layoutVersion, l.Interpreter, b.cfg.Platform)
	for _, kv := range b.cfg.InstallEnv {
		fmt.Fprintf(h, "\x00%s", kv)
	}
	for _, f := range l.DependencyFiles {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		files[f] = data
		fmt.Fprintf(h, "\x00%s\x00%d\x00", f, len(data))
		h.Write(data)
	}
	key := hex.EncodeToString(h.Sum(nil))
	defer b.locks.Lock("deps " + key)()
	data, meta := filepath.Join(b.cfg.CacheDir, "deps", key+".tar.gz"), filepath.Join(b.cfg.CacheDir, "deps", key+".json")
	open := func() (io.ReadCloser, error) { return os.Open(data) }
	if raw, err := os.ReadFile(meta); err == nil {
		var info layerInfo
		if err := json.Unmarshal(raw, &info); err == nil {
			// The modification time tells pruneDeps when it was last used.
			now := time.Now()
			if err := os.Chtimes(meta, now, now); err != nil {
				return nil, fmt.Errorf("marking a dependency layer used: %w", err)
			}
			fmt.Fprintf(log, "dependencies from %s: cached layer %s\n", l.DependencyFiles[0], info.Digest)
			return &layer{info: info, mediaType: mediaType, open: open}, nil
		}
	}

	work, err := os.MkdirTemp(b.cfg.CacheDir, ".tmp-deps-")
	if err != nil {
		return nil, fmt.Errorf("creating a dependency build directory: %w", err)
	}
	defer os.RemoveAll(work)
	for f, content := range files {
		if err := os.WriteFile(filepath.Join(work, f), content, 0o644); err != nil {
			return nil, err
		}
	}
	b.log.InfoContext(ctx, "installing dependencies", "file", l.DependencyFiles[0], "platform", b.cfg.Platform)
	if err := ir.InstallImageDependencies(ctx, work, b.cfg.Platform, b.cfg.InstallEnv, log); err != nil {
		return nil, installError(ctx, l.DependencyFiles[0], log, err)
	}
	deps := filepath.Join(work, l.DepsDir)
	if err := os.MkdirAll(deps, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(b.cfg.CacheDir, ".tmp-layer-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	info, err := writeLayer(tmp, deps, path.Join(strings.TrimPrefix(runtime.ImageCodeDir, "/"), l.DepsDir))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("archiving the dependencies: %w", err)
	}
	raw, err := json.Marshal(info)
	if err == nil {
		err = os.Rename(tmp.Name(), data)
	}
	if err == nil {
		err = writeFileAtomic(meta, raw)
	}
	if err != nil {
		return nil, fmt.Errorf("caching the dependency layer: %w", err)
	}
	return &layer{info: info, mediaType: mediaType, open: open}, nil
}

// depsCacheTTL is how long a dependency layer that no build used stays in
// the cache.
const depsCacheTTL = 30 * 24 * time.Hour

// pruneDeps removes the dependency layers of dir that no build used since
// before: rebuilding one costs an install, nothing is lost. It runs when no
// build does.
func pruneDeps(dir string, before time.Time) error {
	metas, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	for _, meta := range metas {
		st, err := os.Stat(meta)
		if err != nil || !st.ModTime().Before(before) {
			continue
		}
		data := strings.TrimSuffix(meta, ".json") + ".tar.gz"
		if err := errors.Join(os.Remove(meta), os.Remove(data)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing an unused dependency layer: %w", err)
		}
	}
	return nil
}

// installError is the *build.Error of a failed dependency install.
func installError(ctx context.Context, file string, log io.Writer, err error) error {
	msg := fmt.Sprintf("installing dependencies from %s failed: %v", file, err)
	switch {
	case ctx.Err() != nil:
		msg = fmt.Sprintf("the build was stopped while installing dependencies from %s: %v", file, context.Cause(ctx))
	case errors.Is(err, runtime.ErrNeedsBuild):
		msg += "; the image builder installs binary packages only and runs no build step: " +
			"build this function with the kaniko builder of the cluster mode"
	}
	be := &build.Error{Msg: msg, Err: err}
	if t, ok := log.(fmt.Stringer); ok {
		be.Log = t.String()
	}
	return be
}

func writeFileAtomic(name string, data []byte) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}
