//go:build !cluster

// What the default build has instead of cluster.go.
package app

import (
	"fmt"

	"go.uber.org/fx"
)

// errNotBuilt is the refusal of what only the cluster build has. The default
// build has none of the cluster mode's implementations that link the
// Kubernetes client libraries (cluster.go): their package initialisation
// doubles the CPU of every start of the binary, and the embedded mode starts
// it for every instance, as its sandbox's init (docs/architecture.md).
func errNotBuilt(what string) error {
	return fmt.Errorf("%s is part of the cluster mode, which this sless binary was built without: "+
		"the cluster's image has it (build one with `go build -tags cluster ./cmd/sless`)", what)
}

// kanikoBuilder refuses: the kaniko builder is the cluster build's.
func kanikoBuilder(Config) fx.Option { return fx.Error(errNotBuilt("the kaniko builder")) }

// clusterOptions refuse: the kubernetes mode is the cluster build's.
func clusterOptions(Config) fx.Option {
	return fx.Error(errNotBuilt("the kubernetes mode (--mode kubernetes)"))
}

// kubeExecutor refuses: the Kubernetes executor is the cluster build's.
func kubeExecutor(Config) fx.Option { return fx.Error(errNotBuilt("the Kubernetes executor")) }
