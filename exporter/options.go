package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/gather"
	"github.com/certdrift/certdrift/kubeapi"
	"github.com/certdrift/certdrift/remediate"
)

// Validate checks the values the round loop, the shards and the ports rely on. Its errors name
// serve's flags (Options are serve's flags as the exporter needs them), so cmd/certdrift reports
// them as usage errors before anything starts.
func (o Options) Validate() error {
	w := o.Web
	switch {
	case o.Concurrency < 1 || o.Concurrency > 1024:
		return fmt.Errorf("--concurrency %d: want 1..1024", o.Concurrency)
	case o.Interval < 100*time.Millisecond:
		return fmt.Errorf("--interval %s: want at least 100ms", o.Interval)
	case o.Jitter < 0 || o.Jitter > 0.5:
		return fmt.Errorf("--jitter %g: want 0..0.5", o.Jitter)
	case o.RoundTimeout < 0 || o.Timeout < 0 || o.Grace < 0 || o.Debounce < 0 || w.ScrapeTimeout < 0:
		return errors.New("durations must not be negative")
	case w.MaxRequests < 1:
		return fmt.Errorf("--web.max-requests %d: want at least 1", w.MaxRequests)
	case w.MaxConns < 1:
		return fmt.Errorf("--web.max-connections %d: want at least 1", w.MaxConns)
	case w.IdleTimeout <= 0 || w.HeaderTimeout <= 0:
		return errors.New("--web.idle-timeout and --web.read-header-timeout must be positive")
	case o.Shard.Total < 1:
		return fmt.Errorf("--total-shards %d: want at least 1", o.Shard.Total)
	case o.Shard.Index < 0 || o.Shard.Index >= o.Shard.Total:
		return fmt.Errorf("--shard %d: want 0..%d (--total-shards %d)", o.Shard.Index, o.Shard.Total-1, o.Shard.Total)
	case len(w.ListenAddresses) == 0:
		return errors.New("--web.listen-address: at least one address is needed")
	}
	return nil
}

// RepairOptions are `serve --remediate` as its flags give it: the repair policy and the election.
type RepairOptions struct {
	Policy remediate.Policy
	// DryRun plans and counts but changes nothing.
	DryRun bool
	// LeaseName is the election's Lease, in Policy.LeaseNamespace; Identity this replica's name
	// in it ("" for remediate.ElectionIdentity's default).
	LeaseName, Identity string
	LeaseDuration       time.Duration
	Log                 *slog.Logger
}

// Validate checks the repair for a serve in Kubernetes mode or not, split in totalShards, and
// fills in the policy's lease namespace (remediate.Policy.Validate).
func (r *RepairOptions) Validate(kubernetes bool, totalShards int) error {
	switch {
	case !kubernetes:
		return errors.New("--remediate needs Kubernetes mode (--kubeconfig or --in-cluster): outside Kubernetes use certdrift audit --reload")
	case totalShards > 1:
		// A shard sees part of the fleet; one leader among shards would leave the rest unrepaired.
		return errors.New("--remediate does not work with --total-shards > 1: run repair from an unsharded exporter or certdrift audit --reload")
	case r.LeaseName == "":
		return errors.New("--remediate-lease-name must not be empty")
	case r.LeaseDuration < 2*time.Second:
		return fmt.Errorf("--remediate-lease-duration %s: want at least 2s", r.LeaseDuration)
	}
	return r.Policy.Validate(remediate.CommandServe)
}

// Kube is how Kubernetes mode reaches and reads the cluster.
type Kube struct {
	// Options turns the exporter's gather.Options (the policy's timeout, Concurrency, Log) into
	// the cluster's gather options.
	Options func(gather.Options) (gather.KubeOptions, error)
	// REST is the cluster's client configuration.
	REST func() (*rest.Config, error)
}

// Start starts Kubernetes mode (StartKube) on the cluster k names and, when repair is set,
// `serve --remediate` (StartRepair); Close ends what it started, also after an error.
func (x *Exporter) Start(ctx context.Context, k Kube, repair *RepairOptions) error {
	opts, err := k.Options(gather.Options{Timeout: x.Policy().Timeout.D(), Concurrency: x.opt.Concurrency, Log: x.log})
	if err != nil {
		return err
	}
	rc, err := k.REST()
	if err != nil {
		return err
	}
	if err := x.StartKube(ctx, rc, opts); err != nil || repair == nil {
		return err
	}
	return x.StartRepair(rc, *repair)
}

// StartRepair is EnableRepair for the cluster rc names: its client, this replica's identity
// and the election's pace, which follows the Lease's duration (renewed within two thirds of
// it, retried seven times per duration).
func (x *Exporter) StartRepair(rc *rest.Config, r RepairOptions) error {
	client, err := kubeapi.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("--remediate: kubernetes client: %w", err)
	}
	id, err := remediate.ElectionIdentity(r.Identity)
	if err != nil {
		return err
	}
	lease := r.LeaseDuration
	return x.EnableRepair(remediate.RemediatorConfig{Client: client, Policy: r.Policy, DryRun: r.DryRun, Log: r.Log,
		Lease: remediate.LeaseConfig{Namespace: r.Policy.LeaseNamespace, Name: r.LeaseName,
			Identity: id, LeaseDuration: lease, RenewDeadline: lease * 2 / 3, RetryPeriod: lease / 7}})
}
