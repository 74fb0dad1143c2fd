package app

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

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
