//go:build cluster

// The cluster mode's implementations that link the Kubernetes client
// libraries, in the binary built with -tags cluster; cluster_off.go stands
// in for them in the default build (see there why).
package app

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"sless.kube5s.ru/sless/api/v1alpha1"
	"sless.kube5s.ru/sless/internal/names"
	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/kaniko"
	"sless.kube5s.ru/sless/modules/functions"
	fncrstore "sless.kube5s.ru/sless/modules/functions/crstore"
	"sless.kube5s.ru/sless/modules/functions/fncontroller"
	"sless.kube5s.ru/sless/modules/reconciler/crdriver"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/kube"
	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/triggers"
	trcrstore "sless.kube5s.ru/sless/modules/triggers/crstore"
	"sless.kube5s.ru/sless/modules/triggers/trcontroller"
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
			kube, err := newKubeClient(c)
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

// kubeAPI is the kubernetes mode's connection to its API server: its
// address and credentials, and a client with client-go's types and
// sless's custom resources that reads from the API server (no cache), so
// that the REST API reads what it wrote.
type kubeAPI struct {
	config *rest.Config
	scheme *k8sruntime.Scheme
	client client.Client
}

// newKubeAPI returns the connection to the API server of the kubeconfig
// (--kubeconfig, else KUBECONFIG, else ~/.kube/config), else of the
// cluster the server runs in. It contacts no server.
func newKubeAPI(c Config) (*kubeAPI, error) {
	cfg, err := kubeConfig(c)
	if err != nil {
		return nil, err
	}
	scheme := k8sruntime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), v1alpha1.AddToScheme(scheme)); err != nil {
		return nil, err
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("a client of the Kubernetes API server %s: %w", cfg.Host, err)
	}
	return &kubeAPI{config: cfg, scheme: scheme, client: cl}, nil
}

// kubeConfig loads the kubeconfig of c (see newKubeAPI).
func kubeConfig(c Config) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes API server: set --kubeconfig or KUBECONFIG, or run in a pod: %w", err)
	}
	return cfg, nil
}

// newKubeClient returns a client of the API server of c (see newKubeAPI)
// with client-go's types. It contacts no server.
func newKubeClient(c Config) (client.Client, error) {
	api, err := newKubeAPI(c)
	if err != nil {
		return nil, err
	}
	return api.client, nil
}

// leaderElectionID names the Lease of the leader election.
const leaderElectionID = "sless-controllers"

// clusterOptions provide the kubernetes mode: the stores of custom
// resources, their controllers (the reconcile core driven by
// controller-runtime; the leader's and every replica's) and the manager that
// runs them, with leader election.
func clusterOptions(c Config) fx.Option {
	return fx.Module("cluster",
		fx.Provide(
			func() (*kubeAPI, error) { return newKubeAPI(c) },
			func(api *kubeAPI) (*fncrstore.Store, error) {
				return fncrstore.New(api.client, fncrstore.Options{PublicURL: c.PublicURL})
			},
			func(s *fncrstore.Store) functions.Store { return s },
			func(api *kubeAPI) *trcrstore.Triggers { return trcrstore.NewTriggers(api.client, trcrstore.Options{}) },
			func(s *trcrstore.Triggers) triggers.Store { return s },
			func(api *kubeAPI) *trcrstore.Jobs { return trcrstore.NewJobs(api.client, trcrstore.Options{}) },
			func(s *trcrstore.Jobs) triggers.JobStore { return s },
			func() trcontroller.IngressOptions {
				return trcontroller.IngressOptions{Namespace: c.IngressNamespace, Service: c.IngressService}
			},
			func(api *kubeAPI, log *slog.Logger) (manager.Manager, error) {
				return newManager(c, api, log)
			},
		),
		fncontroller.Module,
		trcontroller.Module,
		fx.Invoke(crdriver.Run),
	)
}

// newManager returns the manager of the controllers, electing a leader
// when c says so. Its cache holds the custom resources and the
// Deployments of functions only.
func newManager(c Config, api *kubeAPI, log *slog.Logger) (manager.Manager, error) {
	ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
	functionObjects, err := labels.NewRequirement(names.NamespaceLabel, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	mgr, err := crdriver.NewManager(api.config, api.scheme, crdriver.ManagerOptions{
		LeaderElection: c.LeaderElect, LeaderElectionNamespace: c.LeaderElectionNamespace, LeaderElectionID: leaderElectionID,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&appsv1.Deployment{}: {Label: labels.NewSelector().Add(*functionObjects)},
		}},
	}, log.With("module", "controllers"))
	if err != nil && c.LeaderElect && c.LeaderElectionNamespace == "" {
		// Outside a pod there is no namespace to default to.
		return nil, fmt.Errorf("%w (outside a pod, set --leader-election-namespace, or --leader-elect=false for a single replica)", err)
	}
	return mgr, err
}

// kubeExecutor provides the Kubernetes executor: Deployments and Services
// of the functions' images (its control-plane side) and, until the
// kubernetes mode routes /fn to pods, a data-plane side that answers 503.
func kubeExecutor(c Config) fx.Option {
	return fx.Module("executor",
		fx.Decorate(func(l *slog.Logger) *slog.Logger { return l.With("module", "runtime") }),
		fx.Provide(
			func(api *kubeAPI) (runtime.Deployer, error) {
				opts := kube.Options{RuntimeClassName: c.InstanceRuntimeClass}
				if c.ImageDockerConfig != "" {
					b, err := os.ReadFile(c.ImageDockerConfig)
					if err != nil {
						return nil, fmt.Errorf("the registry credentials (--image-docker-config): %w", err)
					}
					opts.ImagePullSecret = b
				}
				return kube.New(api.client, opts)
			},
			func() runtime.Instances { return kube.Instances{} },
		),
	)
}
