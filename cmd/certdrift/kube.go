package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/gather"
	"github.com/certdrift/certdrift/internal/boundedfile"
	"github.com/certdrift/certdrift/kubeapi"
)

// kubeRestConfig loads the client configuration from a kubeconfig file and optional context.
func kubeRestConfig(path, kctx string) (*rest.Config, error) {
	// client-go reads the file with os.ReadFile: checked first through boundedfile so that a FIFO
	// or a device named by --kubeconfig fails at once instead of hanging (see checkKubeconfig).
	if err := checkKubeconfig(path); err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kctx}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s (context %q): %w", path, kctx, err)
	}
	return cfg, nil
}

// runKube is `certdrift audit --kubeconfig`: the cluster is the configuration.
func (c *auditCmd) runKube(ctx context.Context, io *streams, log *slog.Logger) error {
	failOn, ok := audit.ParseSeverity(c.FailOn)
	if !ok {
		return noRun(fmt.Errorf("--fail-on %q: want info, warning or critical", c.FailOn))
	}
	// The cluster supplies the desired certificates and the Envoys; a config file adds only peer
	// pairings and policy.
	cfg := &config.Config{Policy: config.DefaultPolicy}
	if c.Config != "" {
		var err error
		if cfg, err = config.LoadCluster(c.Config); err != nil {
			return noRun(err)
		}
	}
	policy := c.policy(cfg.Policy)
	opts, err := c.kubeFlags.options(gather.Options{Timeout: policy.Timeout.D(), Concurrency: c.Concurrency, Log: log})
	if err != nil {
		return noRun(err)
	}
	rc, err := c.kubeFlags.restConfig()
	if err != nil {
		return noRun(err)
	}
	kubeapi.RouteKlog(log)
	if c.InventoryOnly {
		return inventoryOnly(ctx, io, rc, opts)
	}
	start := time.Now()
	opts.PairingSources = gather.PairingSources(cfg.Pairings)
	in, err := c.gatherKube(ctx, rc, policy, opts)
	if err != nil {
		return noRun(err)
	}
	in.Config.Pairings = cfg.Pairings
	return c.judge(ctx, io, log, func() audit.Report { return audit.Run(in, policy, time.Now()) }, failOn, start)
}

// inventoryOnly prints the inventory's size once synced (gather.SyncInventory) as JSON.
func inventoryOnly(ctx context.Context, io *streams, rc *rest.Config, opt gather.KubeOptions) error {
	size, err := gather.SyncInventory(ctx, rc, opt)
	if err != nil {
		return noRun(err)
	}
	if err := json.NewEncoder(io.Out).Encode(size); err != nil {
		return noRun(fmt.Errorf("write inventory summary: %w", err))
	}
	return nil
}

// maxKubeconfigBytes bounds --kubeconfig: kubeconfigs embed certificates, so allow many clusters.
const maxKubeconfigBytes = 16 << 20

// checkKubeconfig reads --kubeconfig through boundedfile before client-go reads it again with
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
