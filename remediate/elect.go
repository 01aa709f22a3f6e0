package remediate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/certdrift/certdrift/kubeapi"
)

// A Lease elector of our own, not client-go's tools/leaderelection: that package imports
// client-go's informers and typed clientset (for its LeaseCandidate support), and linking them
// registers every built-in API group at init, ≈10 MB of RSS in every certdrift process against
// issue 4's 50 MB budget (see package kubeapi). The protocol is the one kube-controller-manager
// uses on a coordination.k8s.io/v1 Lease, so `kubectl get lease` reads the same fields:
//
//   - A candidate takes the Lease when it is absent, released (no holderIdentity), lapsed or
//     already its own; taking it from another holder (or after a release) sets acquireTime and
//     increments leaseTransitions. Lapsed is judged on the candidate's own clock only, as
//     client-go does: the Lease has not changed (same resourceVersion) for leaseDurationSeconds
//     since this candidate first read that version. Comparing the holder's renewTime with the
//     candidate's clock would let a replica whose clock runs ahead take over a live leader.
//   - Every write is an Update carrying the resourceVersion that was read (or a Create, which
//     fails if the Lease exists): of two candidates that read the same Lease, the API server
//     accepts one write and answers the other 409 Conflict, so two can never both win.
//   - The holder renews every RetryPeriod and stops leading as soon as no renew has succeeded
//     for RenewDeadline, counted from the moment the last successful renew was sent. The Lease
//     it wrote stays valid for LeaseDuration from (at the latest) that moment, so the holder
//     stops at least LeaseDuration−RenewDeadline before anyone else may take over, whatever
//     the replicas' clocks say: every duration is measured on one clock.
//   - A holder stopping cleanly releases the Lease (clears holderIdentity) after its worker has
//     returned, so another replica takes over at once instead of after LeaseDuration.

// Elector is how Continuous takes part in an election. The Lease elector below is the one
// certdrift runs; tests of Continuous's gating may substitute another.
type Elector interface {
	// Acquire blocks until this replica leads, returning when the winning request was sent
	// (its leadership's deadline counts from then), or until ctx ends (false).
	Acquire(ctx context.Context) (time.Time, bool)
	// Hold keeps the lead taken at acquired until it is lost (the reason) or ctx ends
	// (ctx.Err()).
	Hold(ctx context.Context, acquired time.Time) error
	// Release gives up the lead after a clean stop, so another replica takes over at once.
	Release(ctx context.Context) error
}

// leaseElector is the Elector on a coordination.k8s.io Lease, paced by its durations. Every
// wait and every "how long since" is measured on the elector's clock, so tests step a fake
// clock instead of sleeping through lease durations.
type leaseElector struct {
	e                    *elector
	retry, renewDeadline time.Duration
}

func (l *leaseElector) Acquire(ctx context.Context) (time.Time, bool) {
	// A request may take at most the renew deadline, as while leading.
	return l.e.acquire(ctx, l.retry, l.renewDeadline)
}

func (l *leaseElector) Hold(ctx context.Context, acquired time.Time) error {
	return l.e.hold(ctx, acquired, l.retry, l.renewDeadline)
}

func (l *leaseElector) Release(ctx context.Context) error { return l.e.release(ctx) }

// elector is one candidate's view of one Lease.
type elector struct {
	leases   *kubeapi.Resource[*coordv1.Lease, *coordv1.LeaseList]
	ns, name string
	id       string
	duration time.Duration
	log      *slog.Logger
	clock    clock.Clock

	// held is the Lease as this candidate last wrote it while holding it: renewing from it saves
	// a read, and its resourceVersion makes the renew fail if anyone else wrote since.
	held *coordv1.Lease
	// leader is the last holder seen, for logging a change once.
	leader string
	// observedRV is the resourceVersion of the Lease as last read, and observedAt when (on this
	// candidate's clock) it first read that version: the Lease has lapsed when it stays
	// unchanged for its duration after observedAt.
	observedRV string
	observedAt time.Time
}

func newElector(l LeaseConfig, duration time.Duration, log *slog.Logger, clk clock.Clock) *elector {
	return &elector{leases: l.Client.CoordinationV1().Leases(l.Namespace), ns: l.Namespace, name: l.Name,
		id: l.Identity, duration: duration, log: log, clock: clk}
}

func (e *elector) lease() string { return e.ns + "/" + e.name }

// tryAcquireOrRenew makes one attempt to take or keep the Lease at now. It reports whether this
// candidate holds the Lease after the attempt. An error is a failed request (not a lost race).
func (e *elector) tryAcquireOrRenew(ctx context.Context, now time.Time) (bool, error) {
	rt := metav1.NewMicroTime(now)
	secs := leaseSeconds(e.duration)

	// The common case: renew from the Lease as last written.
	if e.held != nil {
		l := e.held.DeepCopy()
		l.Spec.RenewTime = &rt
		l.Spec.LeaseDurationSeconds = &secs
		got, err := e.leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: "certdrift"})
		if err == nil {
			e.held = got
			return true, nil
		}
		e.held = nil
		if !apierrors.IsConflict(err) {
			return false, fmt.Errorf("renew lease %s: %w", e.lease(), err)
		}
		// Someone else wrote: read it and judge it like any candidate would.
	}

	l, err := e.leases.Get(ctx, e.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		got, err := e.leases.Create(ctx, &coordv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: e.name, Namespace: e.ns},
			Spec: coordv1.LeaseSpec{HolderIdentity: &e.id, LeaseDurationSeconds: &secs,
				AcquireTime: &rt, RenewTime: &rt, LeaseTransitions: new(int32)},
		}, metav1.CreateOptions{FieldManager: "certdrift"})
		if apierrors.IsAlreadyExists(err) {
			return false, nil // another candidate created it first
		}
		if err != nil {
			return false, fmt.Errorf("create lease %s: %w", e.lease(), err)
		}
		e.held = got
		e.observe(e.id)
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read lease %s: %w", e.lease(), err)
	}
	if l.ResourceVersion != e.observedRV {
		e.observedRV, e.observedAt = l.ResourceVersion, now
	}
	holder := deref(l.Spec.HolderIdentity)
	if holder != "" && holder != e.id && !lapsed(l, e.observedAt, now, e.duration) {
		e.observe(holder)
		return false, nil
	}
	if holder != e.id {
		l.Spec.AcquireTime = &rt
		l.Spec.LeaseTransitions = ptr(deref(l.Spec.LeaseTransitions) + 1)
	}
	l.Spec.HolderIdentity = &e.id
	l.Spec.RenewTime = &rt
	l.Spec.LeaseDurationSeconds = &secs
	got, err := e.leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: "certdrift"})
	if apierrors.IsConflict(err) {
		return false, nil // another candidate wrote between our read and our write
	}
	if err != nil {
		return false, fmt.Errorf("take lease %s: %w", e.lease(), err)
	}
	e.held = got
	e.observe(e.id)
	return true, nil
}

// release gives the Lease up, if this candidate still holds it as last written: a conflict means
// someone else holds it now, which is fine.
func (e *elector) release(ctx context.Context) error {
	if e.held == nil {
		return nil
	}
	l := e.held.DeepCopy()
	e.held = nil
	now := metav1.NewMicroTime(e.clock.Now())
	l.Spec.HolderIdentity = nil
	l.Spec.RenewTime = &now
	l.Spec.LeaseDurationSeconds = ptr(int32(1))
	_, err := e.leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: "certdrift"})
	if err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("release lease %s: %w", e.lease(), err)
	}
	return nil
}

// observe logs a change of leader once.
func (e *elector) observe(holder string) {
	if holder == e.leader {
		return
	}
	e.leader = holder
	if holder != e.id {
		e.log.Info("remediate: another replica leads", "lease", e.lease(), "leader", holder)
	}
}

// leaseSeconds is d in whole seconds, rounded up: the Lease must not promise less than the
// holder assumes.
func leaseSeconds(d time.Duration) int32 {
	return int32(max((d+time.Second-1)/time.Second, 1))
}

// lapsed says whether l, unchanged since this candidate first read it at observedAt, has outlived
// its holder's promise by now: its leaseDurationSeconds (ours when it has none) have passed on
// this candidate's clock. The holder's renewTime is not compared with our clock, so clock skew
// between replicas cannot cut a live leader's term short. A candidate that first reads a stale
// Lease therefore waits one duration before taking it, as client-go's elector does.
func lapsed(l *coordv1.Lease, observedAt, now time.Time, def time.Duration) bool {
	d := def
	if l.Spec.LeaseDurationSeconds != nil {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return observedAt.Add(d).Before(now)
}

// acquire tries to take the Lease every RetryPeriod (with jitter, so candidates started together
// do not keep colliding) until it holds it or ctx ends. It returns when the winning request was
// sent: the renew time it wrote, from which the leadership's deadline counts.
func (e *elector) acquire(ctx context.Context, retry, requestTimeout time.Duration) (time.Time, bool) {
	for {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		sent := e.clock.Now()
		ok, err := e.tryAcquireOrRenew(rctx, sent)
		cancel()
		if ok {
			return sent, true
		}
		if err != nil && ctx.Err() == nil {
			e.log.Warn("remediate: leader election", "lease", e.lease(), "err", err)
		}
		jittered := retry + time.Duration(rand.Int64N(int64(retry/5)+1))
		if sleepClock(ctx, e.clock, jittered) != nil {
			return time.Time{}, false
		}
	}
}

// hold renews the Lease every retry until a renew has not succeeded for renewDeadline (counted
// from when the last successful one was sent, first the acquiring one at acquired) or ctx ends.
// It returns the reason it stopped.
func (e *elector) hold(ctx context.Context, acquired time.Time, retry, renewDeadline time.Duration) error {
	lastOK := acquired
	for {
		if err := sleepClock(ctx, e.clock, retry); err != nil {
			return err
		}
		// The request may not outlive the leadership it would extend (measured on e.clock, so a
		// timeout rather than a wall-clock deadline).
		deadline := lastOK.Add(renewDeadline)
		rctx, cancel := context.WithTimeout(ctx, deadline.Sub(e.clock.Now()))
		sent := e.clock.Now()
		ok, err := e.tryAcquireOrRenew(rctx, sent)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if ok {
			lastOK = sent
			continue
		}
		if err != nil {
			e.log.Warn("remediate: renew leadership", "lease", e.lease(), "err", err)
		}
		if err == nil && e.held == nil {
			return errLeaseTaken
		}
		if !e.clock.Now().Before(deadline) {
			return fmt.Errorf("no renew of lease %s succeeded within %s: %w", e.lease(), renewDeadline, err)
		}
	}
}

var errLeaseTaken = errors.New("another replica holds the lease")

func deref[T any](p *T) T {
	if p == nil {
		var z T
		return z
	}
	return *p
}

func ptr[T any](v T) *T { return &v }

// sleepClock waits d on clk, or until ctx ends.
func sleepClock(ctx context.Context, clk clock.Clock, d time.Duration) error {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
