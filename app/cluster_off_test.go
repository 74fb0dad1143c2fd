//go:build !cluster

package app

import (
	"strings"
	"testing"

	"go.uber.org/fx"
)

// TestKanikoNeedsTheClusterBuild: the default build has no kaniko builder,
// and says which build has.
func TestKanikoNeedsTheClusterBuild(t *testing.T) {
	cfg := testConfig(t, "--builder", "kaniko", "--image-repository", "registry.example.com/sless/functions")
	err := fx.New(builderOptions(cfg, choose(cluster, cfg.Builder)), fx.NopLogger).Err()
	if want := "the kaniko builder is part of the cluster mode, which this sless binary was built without"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want an error with %q", err, want)
	}
}

// TestKubernetesModeNeedsTheClusterBuild: the default build has no
// kubernetes mode, and says which build has.
func TestKubernetesModeNeedsTheClusterBuild(t *testing.T) {
	cfg := testConfig(t, kubernetesArgs...)
	err := fx.New(Options(cfg, cfg.APIToken, discard), fx.NopLogger).Err()
	if want := "the kubernetes mode (--mode kubernetes) is part of the cluster mode, which this sless binary was built without"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want an error with %q", err, want)
	}
}
