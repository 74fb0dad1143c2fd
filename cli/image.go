package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"sless.kube5s.ru/sless/app"
	"sless.kube5s.ru/sless/client"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/crane"
	"sless.kube5s.ru/sless/modules/storage"
)

func newImageCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "image", Short: "Build function images without a server"}
	cmd.AddCommand(newImageBuildCmd())
	return cmd
}

type imageBuildFlags struct {
	runtime, handler, baseImage string
	cfg                         crane.Config
	passwordStdin               bool
}

func newImageBuildCmd() *cobra.Command {
	var f imageBuildFlags
	cmd := &cobra.Command{
		Use:   "build DIR --runtime RUNTIME --image REPOSITORY",
		Short: "Zip a directory, build the function's image with the crane builder and push it",
		Long: `Zip DIR (as deploy does), build the image the cluster mode would run for it
(the runtime's base image, a dependency layer, a code layer; see docs/builds.md)
and push it to REPOSITORY. Prints the digest-pinned reference. The same code
gives the same digest, and an image already in the registry is not pushed again.
Registry credentials come from --docker-config (default: ~/.docker/config.json
when it exists) or from --username with --password-stdin.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return imageBuild(cmd.Context(), &f, args[0], cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.runtime, "runtime", "", "runtime, e.g. python3.11 or nodejs20 (required)")
	fl.StringVar(&f.handler, "handler", "", "handler as <file>.<function> (default: the runtime's, handler.handle)")
	fl.StringVar(&f.cfg.Repository, "image", "", "repository to push to, e.g. registry.example.com/sless/functions (required)")
	fl.StringVar(&f.baseImage, "base-image", "", "base image (default: <registry of --image>/sless-runtime-<runtime>:<version>)")
	fl.BoolVar(&f.cfg.Insecure, "insecure", false, "allow plain HTTP to the registries (loopback ones always may)")
	fl.StringVar(&f.cfg.DockerConfig, "docker-config", "", "docker config.json with the registries' credentials")
	fl.StringVar(&f.cfg.Username, "username", "", "registry user name, with --password-stdin")
	fl.BoolVar(&f.passwordStdin, "password-stdin", false, "read the registry password from standard input")
	fl.StringVar(&f.cfg.Platform, "platform", "linux/amd64", "platform of the image: linux/amd64 or linux/arm64")
	fl.StringVar(&f.cfg.CacheDir, "cache-dir", "", "directory of the cached dependency layers (default: the user's cache directory)")
	fl.StringArrayVar(&f.cfg.InstallEnv, "install-env", nil, "K=V added to the dependency tools' environment, e.g. PIP_INDEX_URL=... (repeatable)")
	fl.DurationVar(&f.cfg.Timeout, "timeout", 10*time.Minute, "longest the build may take")
	cmd.MarkFlagRequired("runtime")
	cmd.MarkFlagRequired("image")
	return cmd
}

func imageBuild(ctx context.Context, f *imageBuildFlags, dir string, stdin io.Reader, stdout, stderr io.Writer) error {
	start := time.Now()
	if err := f.complete(stdin); err != nil {
		return err
	}
	zip, sum, err := client.ZipDir(dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "packaged %s: %s (sha256 %s)\n", dir, humanize.IBytes(uint64(len(zip))), sum[:12])
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == slog.LevelKey {
				return slog.Attr{} // progress lines, not a server log
			}
			return a
		}}))
	b, err := app.NewImageBuilder(f.cfg, oneBlob{sha: sum, data: zip}, log)
	if err != nil {
		return err
	}
	abs, _ := filepath.Abs(dir)
	res, err := b.Image(ctx, build.Request{Namespace: "cli", Function: filepath.Base(abs), Runtime: f.runtime,
		Handler: f.handler, CodeSHA256: sum})
	if err != nil {
		if be, ok := build.AsError(err); ok && be.Log != "" {
			fmt.Fprintf(stderr, "--- build log ---\n%s\n--- end of build log ---\n", strings.TrimRight(be.Log, "\n"))
		}
		return err
	}
	if res.Reused {
		fmt.Fprintf(stderr, "the registry has this image already: nothing pushed (%s)\n", since(start))
	} else {
		fmt.Fprintf(stderr, "pushed (%s)\n", since(start))
	}
	fmt.Fprintln(stdout, res.Artifact)
	return nil
}

// complete fills the defaults that depend on the environment.
func (f *imageBuildFlags) complete(stdin io.Reader) error {
	if f.baseImage != "" {
		f.cfg.BaseImages = map[string]string{f.runtime: f.baseImage}
	}
	if f.passwordStdin != (f.cfg.Username != "") {
		return errors.New("--username and --password-stdin go together")
	}
	if f.passwordStdin {
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("reading the password: %w", err)
		}
		f.cfg.Password = strings.TrimRight(line, "\r\n")
	}
	if f.cfg.DockerConfig == "" && f.cfg.Username == "" {
		if p := defaultDockerConfig(); p != "" {
			f.cfg.DockerConfig = p
		}
	}
	if f.cfg.CacheDir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return fmt.Errorf("no cache directory: %w; set --cache-dir", err)
		}
		f.cfg.CacheDir = filepath.Join(cache, "sless", "image-cache")
	}
	return nil
}

// defaultDockerConfig is docker's own config file, when there is one.
func defaultDockerConfig() string {
	dir := os.Getenv("DOCKER_CONFIG")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".docker")
	}
	p := filepath.Join(dir, "config.json")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// oneBlob is the code of a command-line build.
type oneBlob struct {
	sha  string
	data []byte
}

func (o oneBlob) Open(_ context.Context, sha string) (io.ReadCloser, error) {
	if sha != o.sha {
		return nil, storage.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(o.data)), nil
}
