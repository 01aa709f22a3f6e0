package remediate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/kubeapi"
)

// Continuous repair (`certdrift serve --remediate`) runs the same Plan and Executor after every
// round, but only in the replica that holds a coordination.k8s.io Lease (elect.go, not
// client-go's tools/leaderelection, whose imports cost ≈10 MB of RSS): two exporters acting on
// one report would evict two pods of a workload at once and defeat the one-pod-at-a-time guard.
// A replica that does not hold the Lease has no worker at all, so it cannot act; a replica that
// loses it has its action's context cancelled.

// LeaseConfig names the election Lease and paces it (client-go's defaults when zero: 15s, 10s,
// 2s, as kube-controller-manager uses).
type LeaseConfig struct {
	Client    *kubeapi.Client
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
	// Clock paces the election and dates the actions (the real clock when nil).
	Clock clock.Clock
	// Elector, when set, replaces the Lease elector Lease configures (tests of the gating).
	Elector Elector

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
	// The holder stops leading RenewDeadline after its last renew while the Lease it wrote lasts
	// LeaseDuration: the difference is the safety margin (see elect.go).
	duration, renew, retry := l.durations()
	if renew >= duration {
		return fmt.Errorf("remediate leader election on lease %s/%s: renew deadline %s must be shorter than the lease duration %s", l.Namespace, l.Name, renew, duration)
	}
	if retry >= renew {
		return fmt.Errorf("remediate leader election on lease %s/%s: retry period %s must be shorter than the renew deadline %s", l.Namespace, l.Name, retry, renew)
	}
	return nil
}

// durations are the lease duration, renew deadline and retry period, defaults applied.
func (l LeaseConfig) durations() (duration, renew, retry time.Duration) {
	return or(l.LeaseDuration, 15*time.Second), or(l.RenewDeadline, 10*time.Second), or(l.RetryPeriod, 2*time.Second)
}

// Run takes part in the election until ctx ends; while leading it runs the worker. It stands
// again after losing the Lease (an API server hiccup must not end repair for good). On return
// the worker has stopped and, if this replica led, the Lease has been released.
func (c *Continuous) Run(ctx context.Context) error {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	l := c.Lease
	duration, renew, retry := l.durations()
	e := c.Elector
	if e == nil {
		if err := l.validate(); err != nil {
			return err
		}
		e = &leaseElector{e: newElector(l, duration, c.Log, c.Clock), retry: retry, renewDeadline: renew}
	}
	c.wake = make(chan struct{}, 1)
	lease := l.Namespace + "/" + l.Name
	for ctx.Err() == nil {
		acquired, ok := e.Acquire(ctx)
		if !ok {
			break
		}
		c.Log.Info("remediate: leading", "lease", lease, "identity", l.Identity)
		lctx, cancel := context.WithCancel(ctx)
		c.leading.Store(true)
		done := make(chan struct{})
		go func() { defer close(done); c.work(lctx) }()
		err := e.Hold(ctx, acquired)
		// Stop offering first, then end the action, and only then let the Lease go: another
		// replica must not act while this one still does.
		c.leading.Store(false)
		cancel()
		<-done
		c.take()
		if ctx.Err() != nil {
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), renew)
			if err := e.Release(rctx); err != nil {
				c.Log.Warn("remediate: release leadership", "lease", lease, "err", err)
			}
			rcancel()
			c.Log.Info("remediate: not leading (stopped)", "lease", lease, "identity", l.Identity)
			break
		}
		c.Log.Info("remediate: not leading", "lease", lease, "identity", l.Identity, "reason", err.Error())
		if err := sleepClock(ctx, c.Clock, retry); err != nil {
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
		lastEnd = c.Clock.Now()
	}
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
