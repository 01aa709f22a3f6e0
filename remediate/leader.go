package remediate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/certdrift/certdrift/audit"
)

// Continuous repair (`certdrift serve --remediate`) runs the same Plan and Executor after every
// round, but only in the replica that holds a coordination.k8s.io Lease (client-go's
// tools/leaderelection): two exporters acting on one report would evict two pods of a workload
// at once and defeat the one-pod-at-a-time guard. A replica that does not hold the Lease has no
// worker at all, so it cannot act; a replica that loses it has its action's context cancelled.

// LeaseConfig names the election Lease and paces it (client-go's defaults when zero: 15s, 10s,
// 2s, as kube-controller-manager uses).
type LeaseConfig struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	// Identity must differ between replicas (pod name plus a random suffix).
	Identity      string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// Work is one complete round handed to the leader.
type Work struct {
	// Started is when the round began observing: a round that began before the last action
	// ended may show pods that are already gone or replaced, so it is not acted on.
	Started time.Time
	Report  audit.Report
	Inputs  audit.Inputs
}

// ActFunc plans and executes one round's repair; ctx ends when leadership is lost.
type ActFunc func(ctx context.Context, w Work)

// Continuous hands rounds to the elected leader's worker.
type Continuous struct {
	Lease LeaseConfig
	Act   ActFunc
	Log   *slog.Logger

	leading atomic.Bool
	mu      sync.Mutex
	pending *Work
	wake    chan struct{}
}

// Leading reports whether this replica holds the Lease now.
func (c *Continuous) Leading() bool { return c.leading.Load() }

// Offer hands a complete round to the worker without blocking; a newer round replaces one not
// yet taken. A replica that is not leading drops it.
func (c *Continuous) Offer(w Work) {
	if !c.leading.Load() {
		return
	}
	c.mu.Lock()
	c.pending = &w
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Continuous) take() *Work {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.pending
	c.pending = nil
	return w
}

// validate checks the configuration before anything runs.
func (l LeaseConfig) validate() error {
	switch {
	case l.Client == nil:
		return errors.New("remediate leader election: no Kubernetes client")
	case l.Namespace == "" || l.Name == "":
		return fmt.Errorf("remediate leader election: lease %q in namespace %q: both are required", l.Name, l.Namespace)
	case l.Identity == "":
		return errors.New("remediate leader election: empty identity")
	}
	return nil
}

// Run takes part in the election until ctx ends; while leading it runs the worker. It stands
// again after losing the Lease (an API server hiccup must not end repair for good).
func (c *Continuous) Run(ctx context.Context) error {
	if err := c.Lease.validate(); err != nil {
		return err
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	c.wake = make(chan struct{}, 1)
	l := c.Lease
	cfg := leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: l.Namespace, Name: l.Name},
			Client:     l.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: l.Identity},
		},
		LeaseDuration: or(l.LeaseDuration, 15*time.Second),
		RenewDeadline: or(l.RenewDeadline, 10*time.Second),
		RetryPeriod:   or(l.RetryPeriod, 2*time.Second),
		// Give the Lease up on shutdown so that another replica takes over at once instead of
		// after LeaseDuration.
		ReleaseOnCancel: true,
		Name:            l.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				c.Log.Info("remediate: leading", "lease", l.Namespace+"/"+l.Name, "identity", l.Identity)
				c.leading.Store(true)
				c.work(lctx)
			},
			OnStoppedLeading: func() {
				c.leading.Store(false)
				c.take()
				c.Log.Info("remediate: not leading", "lease", l.Namespace+"/"+l.Name, "identity", l.Identity)
			},
			OnNewLeader: func(id string) {
				if id != l.Identity {
					c.Log.Info("remediate: another replica leads", "lease", l.Namespace+"/"+l.Name, "leader", id)
				}
			},
		},
	}
	le, err := leaderelection.NewLeaderElector(cfg)
	if err != nil {
		return fmt.Errorf("remediate leader election on lease %s/%s: %w", l.Namespace, l.Name, err)
	}
	for ctx.Err() == nil {
		le.Run(ctx) // returns when leadership is lost or ctx ends
		c.leading.Store(false)
		if err := sleepCtx(ctx, cfg.RetryPeriod); err != nil {
			break
		}
	}
	return nil
}

// work acts on offered rounds, one at a time, while ctx (the leadership) lasts.
func (c *Continuous) work(ctx context.Context) {
	var lastEnd time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		w := c.take()
		if w == nil {
			continue
		}
		if w.Started.Before(lastEnd) {
			c.Log.Debug("remediate: round began before the last action ended; waiting for a fresh one")
			continue
		}
		c.Act(ctx, *w)
		lastEnd = time.Now()
	}
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
