//go:build cluster

// The cluster mode's implementations that link the Kubernetes client
// libraries, in the binary built with -tags cluster; cluster_off.go stands
// in for them in the default build (see there why).
package app

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"go.uber.org/fx"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/kaniko"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/storage"
)

// kanikoBuilder provides the kaniko builder.
func kanikoBuilder(c Config) fx.Option {
	return fx.Module("build",
		fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "build") }),
		fx.Provide(func(lc fx.Lifecycle, blobs storage.Blobs, runtimes *runtime.Registry, log *slog.Logger) (build.Builder, error) {
			contexts, err := kanikoContexts(c)
			if err != nil {
				return nil, err
			}
			kube, err := newKubeClient()
			if err != nil {
				return nil, fmt.Errorf("the kaniko builder: %w", err)
			}
			b, err := kaniko.New(kanikoConfig(c), kube, contexts, blobs, runtimes, log)
			if err != nil {
				return nil, err
			}
			lc.Append(fx.Hook{OnStart: b.Start, OnStop: b.Stop})
			return b, nil
		}),
	)
}

// kanikoConfig is the kaniko builder's part of c, which validate checked.
func kanikoConfig(c Config) kaniko.Config {
	bases, _ := parseBaseImages(c.ImageBaseImages)
	return kaniko.Config{Namespace: c.KanikoNamespace, Repository: c.ImageRepository, BaseImages: bases,
		Image: c.KanikoImage, FetchImage: c.KanikoFetchImage, RegistrySecret: c.KanikoRegistrySecret,
		Insecure: c.ImageInsecure, Platform: c.ImagePlatform, CPU: c.KanikoCPU, Memory: c.KanikoMemory,
		Limits: c.BuildLimits, Timeout: c.BuildTimeout, TempDir: filepath.Join(c.DataDir, "tmp")}
}

// kanikoContexts keeps the kaniko builder's build contexts in the bucket of
// the blob store, which must be S3's: the build pods download them.
func kanikoContexts(c Config) (*kaniko.S3Contexts, error) {
	spec, err := parseBlobURL(&c)
	if err != nil {
		return nil, err
	}
	if spec.s3 == nil {
		return nil, errors.New("the kaniko builder needs an s3:// blob URL (--blob-url): its build pods download the code from S3")
	}
	s3 := spec.s3
	return kaniko.NewS3Contexts(kaniko.S3Config{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Prefix: s3.Prefix, Region: s3.Region,
		AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, UseSSL: s3.UseSSL, PathStyle: s3.PathStyle})
}

// newKubeClient returns a client of the Kubernetes API server of the
// kubeconfig (KUBECONFIG, else ~/.kube/config), else of the cluster the
// server runs in. It contacts no server.
func newKubeClient() (client.Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes API server: set KUBECONFIG or run in a pod: %w", err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, fmt.Errorf("a client of the Kubernetes API server %s: %w", cfg.Host, err)
	}
	return c, nil
}
