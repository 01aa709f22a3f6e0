package main

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/probe/kube"
)

// kubeFlags are the Kubernetes-mode flags, shared by `audit` and `serve` so that both read a
// cluster the same way.
type kubeFlags struct {
	Kubeconfig  string        `type:"path" placeholder:"FILE" env:"CERTDRIFT_KUBECONFIG" help:"Kubernetes mode: audit the Envoy pods of the cluster in this kubeconfig."`
	InCluster   bool          `name:"in-cluster" env:"CERTDRIFT_IN_CLUSTER" help:"Kubernetes mode with the pod's ServiceAccount (when certdrift runs in the cluster)."`
	Context     string        `name:"context" env:"CERTDRIFT_CONTEXT" help:"Kubernetes mode: kubeconfig context (default: its current context)."`
	Namespace   []string      `name:"namespace" sep:"," env:"CERTDRIFT_NAMESPACE" help:"Kubernetes mode: only these namespaces (repeatable or comma-separated); namespace-scoped Roles suffice."`
	Selector    []string      `name:"selector" sep:"none" env:"CERTDRIFT_SELECTOR" help:"Kubernetes mode: only pods matching this label selector (repeatable: a pod matching any is considered)."`
	Preset      []string      `name:"preset" sep:"," env:"CERTDRIFT_PRESET" help:"Kubernetes mode: kinds of Envoy to discover (envoy, istio, envoy-gateway, annotated; default all)."`
	AdminAccess string        `name:"admin-access" default:"auto" enum:"auto,direct,port-forward" env:"CERTDRIFT_ADMIN_ACCESS" help:"Kubernetes mode: reach Envoy admins by pod IP, API-server port-forward, or auto (pod IP, else port-forward): ${enum}."`
	SyncTimeout time.Duration `default:"30s" env:"CERTDRIFT_SYNC_TIMEOUT" help:"Kubernetes mode: how long to wait for the initial list of Secrets and pods."`
}

// enabled reports whether Kubernetes mode was asked for.
func (k kubeFlags) enabled() bool { return k.Kubeconfig != "" || k.InCluster }

func (k kubeFlags) validate() error {
	if k.Kubeconfig != "" && k.InCluster {
		return errors.New("--kubeconfig and --in-cluster are exclusive")
	}
	if k.InCluster && k.Context != "" {
		return errors.New("--context needs --kubeconfig")
	}
	if k.SyncTimeout < 0 {
		return fmt.Errorf("--sync-timeout %s: must not be negative", k.SyncTimeout)
	}
	return nil
}

// restConfig is the client configuration the flags name.
func (k kubeFlags) restConfig() (*rest.Config, error) {
	if k.InCluster {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("--in-cluster: %w", err)
		}
		return rc, nil
	}
	return kubeRestConfig(k.Kubeconfig, k.Context)
}

// options turns the flags into KubeOptions; GatherOptions are the caller's.
func (k kubeFlags) options(g GatherOptions) (KubeOptions, error) {
	mode, err := kube.ParseAdminMode(k.AdminAccess)
	if err != nil {
		return KubeOptions{}, fmt.Errorf("--admin-access: %w", err)
	}
	presets := make([]kube.Preset, len(k.Preset))
	for i, p := range k.Preset {
		presets[i] = kube.Preset(p)
	}
	return KubeOptions{
		Namespaces: k.Namespace, Selectors: k.Selector, Presets: presets,
		AdminMode: mode, SyncTimeout: k.SyncTimeout, GatherOptions: g,
	}, nil
}
