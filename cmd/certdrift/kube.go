package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/gather"
	"github.com/certdrift/certdrift/kubeapi"
)

// setup is what a Kubernetes-mode command reads before it gathers: the config file, of which only
// peer pairings and policy apply (the cluster supplies the desired certificates and the Envoys),
// the policy after the command's flags (policyOf), the gather options and the REST config.
func (k kubeFlags) setup(configPath string, policyOf func(config.Policy) config.Policy, concurrency int, log *slog.Logger) (*config.Config, config.Policy, gather.KubeOptions, *rest.Config, error) {
	cfg := &config.Config{Policy: config.DefaultPolicy}
	if configPath != "" {
		var err error
		if cfg, err = config.LoadCluster(configPath); err != nil {
			return nil, config.Policy{}, gather.KubeOptions{}, nil, err
		}
	}
	policy := policyOf(cfg.Policy)
	opts, err := k.options(gather.Options{Timeout: policy.Timeout.D(), Concurrency: concurrency, Log: log})
	if err != nil {
		return nil, config.Policy{}, gather.KubeOptions{}, nil, err
	}
	rc, err := k.restConfig()
	if err != nil {
		return nil, config.Policy{}, gather.KubeOptions{}, nil, err
	}
	kubeapi.RouteKlog(log)
	return cfg, policy, opts, rc, nil
}

// runKube is `certdrift audit --kubeconfig`: the cluster is the configuration.
func (c *auditCmd) runKube(ctx context.Context, io *streams, log *slog.Logger) error {
	failOn, ok := audit.ParseSeverity(c.FailOn)
	if !ok {
		return noRun(fmt.Errorf("--fail-on %q: want info, warning or critical", c.FailOn))
	}
	cfg, policy, opts, rc, err := c.kubeFlags.setup(c.Config, c.policy, c.Concurrency, log)
	if err != nil {
		return noRun(err)
	}
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
