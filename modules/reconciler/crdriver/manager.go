package crdriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// ManagerOptions configure NewManager.
type ManagerOptions struct {
	// LeaderElection elects one leader among the replicas, with a Lease
	// named LeaderElectionID in LeaderElectionNamespace; the controllers
	// that are not Everywhere run in the leader only. Without it every
	// replica runs them: only for a single replica.
	LeaderElection bool
	// LeaderElectionNamespace holds the Lease; default: the namespace of
	// the pod the server runs in (outside a pod it must be set).
	LeaderElectionNamespace string
	// LeaderElectionID names the Lease; required with LeaderElection.
	LeaderElectionID string
	// Cache selects what the manager's informers hold; default: every
	// object of the watched kinds.
	Cache cache.Options
}

// NewManager returns a manager of controllers over the API server of cfg
// with the types of scheme, logging to log. It serves no metrics or health
// endpoints of its own (the server's /metrics and /readyz are the
// server's) and contacts the API server only once it starts.
func NewManager(cfg *rest.Config, scheme *k8sruntime.Scheme, opts ManagerOptions, log *slog.Logger) (manager.Manager, error) {
	if opts.LeaderElection && opts.LeaderElectionID == "" {
		return nil, errors.New("leader election needs the name of its Lease")
	}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                        scheme,
		Logger:                        logr.FromSlogHandler(log.Handler()),
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              opts.LeaderElectionID,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         opts.Cache,
	})
	if err != nil {
		return nil, fmt.Errorf("a manager of controllers: %w", err)
	}
	return mgr, nil
}

// RunParams are what Run needs.
type RunParams struct {
	fx.In
	Lifecycle   fx.Lifecycle
	Shutdowner  fx.Shutdowner
	Manager     manager.Manager
	Controllers []Controller `group:"controllers"`
	Log         *slog.Logger
}

// Run sets every controller of the group up on the manager and runs the
// manager from the server's start to its stop. A manager that stops by
// itself (its leadership lost, its informers failed) stops the server with
// exit code 1, so that the replica restarts and stands for election again
// rather than serve without its controllers.
func Run(p RunParams) error {
	for _, c := range p.Controllers {
		if err := c.SetupWithManager(p.Manager); err != nil {
			return fmt.Errorf("setting up a controller: %w", err)
		}
	}
	var (
		cancel context.CancelFunc
		done   = make(chan struct{})
		once   sync.Once
	)
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			var runCtx context.Context
			runCtx, cancel = context.WithCancel(context.WithoutCancel(ctx))
			go func() {
				defer close(done)
				err := p.Manager.Start(runCtx)
				if runCtx.Err() == nil {
					p.Log.Error("the controllers stopped; stopping the server", "error", err)
					once.Do(func() { p.Shutdowner.Shutdown(fx.ExitCode(1)) })
				}
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			cancel()
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				return fmt.Errorf("the controllers did not stop: %w", ctx.Err())
			}
		},
	})
	return nil
}
