package kubeapi

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/certdrift/certdrift/internal/boundedfile"
)

// maxKubeconfigBytes bounds a kubeconfig: kubeconfigs embed certificates, so allow many clusters.
const maxKubeconfigBytes = 16 << 20

// Kubeconfig loads the client configuration from a kubeconfig file and context ("" for its
// current context); "" as path follows client-go's defaults. The caller sets the rate limits.
func Kubeconfig(path, context string) (*rest.Config, error) {
	// client-go reads the file with os.ReadFile: checked first through boundedfile so that a FIFO
	// or a device named as the kubeconfig fails at once instead of hanging (see checkKubeconfig).
	if err := checkKubeconfig(path); err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s (context %q): %w", path, context, err)
	}
	return cfg, nil
}

// checkKubeconfig reads the kubeconfig through boundedfile before client-go reads it again with
// os.ReadFile (as it does the certificate, key and token files the kubeconfig names, on its own
// schedule: those are client-go's). A check then a read leaves a moment for the path to be
// swapped; it stops the plain mistakes and hostile paths, which is what hung the process.
func checkKubeconfig(path string) error {
	if path == "" {
		return nil
	}
	_, _, err := boundedfile.Read(path, maxKubeconfigBytes)
	return err
}
