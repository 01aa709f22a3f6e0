package remediate

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/kubeapi"
)

// These tests run the elector against the testbed's real API server: the optimistic concurrency
// that keeps two candidates from both winning is the API server's resourceVersion check, which a
// fake clientset does not have.

// replica is one Continuous with a counting ActFunc and a switch that cuts it off the API server.
type replica struct {
	id     string
	c      *Continuous
	net    *partition
	acted  atomic.Int32
	cancel context.CancelFunc
	done   chan struct{}
}

// testLease paces elections fast enough for tests; LeaseDuration−RenewDeadline is the margin
// between a cut-off leader stepping down and anyone else taking over.
func testLease(c *kubeapi.Client, ns, id string) LeaseConfig {
	return LeaseConfig{Client: c, Namespace: ns, Name: "certdrift-remediate", Identity: id,
		LeaseDuration: 3 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}
}

func startReplica(t *testing.T, ns, id string) *replica {
	t.Helper()
	tb := controlPlane(t)
	r := &replica{id: id, done: make(chan struct{}), net: &partition{}}
	r.c = &Continuous{
		Lease: testLease(newClient(t, tb, r.net), ns, id),
		Act:   func(context.Context, Work) { r.acted.Add(1) },
		Log:   slog.New(slog.DiscardHandler),
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		if err := r.c.Run(ctx); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func (r *replica) stop() { r.cancel(); <-r.done }

// watchLeaders samples every replica's Leading() until stopped and records any moment at which
// two of them led at once.
type leaderWatch struct {
	stopped chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	both    []string
}

func watchLeaders(rs []*replica) *leaderWatch {
	w := &leaderWatch{stopped: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stopped:
				return
			case <-tick.C:
			}
			var leading []string
			for _, r := range rs {
				if r.c.Leading() {
					leading = append(leading, r.id)
				}
			}
			if len(leading) > 1 {
				w.mu.Lock()
				w.both = append(w.both, strings.Join(leading, "+"))
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *leaderWatch) check(t *testing.T) {
	t.Helper()
	close(w.stopped)
	<-w.done
	if len(w.both) > 0 {
		t.Errorf("two replicas led at once %d times, e.g. %s", len(w.both), w.both[0])
	}
}

// leaderOf waits until exactly one of rs leads and returns it.
func leaderOf(t *testing.T, rs []*replica, within time.Duration) *replica {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		var leading []*replica
		for _, r := range rs {
			if r.c.Leading() {
				leading = append(leading, r)
			}
		}
		if len(leading) == 1 {
			return leading[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no single leader among %d replicas within %s", len(rs), within)
	return nil
}

// offerFor offers rounds to every replica for d.
func offerFor(rs []*replica, d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, r := range rs {
			r.c.Offer(Work{Started: time.Now()})
		}
	}
}

func getLease(t *testing.T, c *kubeapi.Client, ns, name string) *coordv1.Lease {
	t.Helper()
	l, err := c.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read lease %s/%s: %v", ns, name, err)
	}
	return l
}

func TestContinuousElection(t *testing.T) {
	tb := controlPlane(t)
	ns := testNamespace(t, tb)
	admin := newClient(t, tb, nil)
	rs := []*replica{startReplica(t, ns, "a"), startReplica(t, ns, "b"), startReplica(t, ns, "c")}
	w := watchLeaders(rs)
	defer w.check(t)

	// One leader; only it acts, for longer than a lease.
	leader := leaderOf(t, rs, 10*time.Second)
	offerFor(rs, 4*time.Second)
	for _, r := range rs {
		if r != leader && r.acted.Load() != 0 {
			t.Errorf("follower %s acted %d times while %s led", r.id, r.acted.Load(), leader.id)
		}
	}
	if leader.acted.Load() == 0 {
		t.Errorf("leader %s never acted", leader.id)
	}
	l := getLease(t, admin, ns, "certdrift-remediate")
	if got := deref(l.Spec.HolderIdentity); got != leader.id {
		t.Errorf("lease holder %q, want the leader %s", got, leader.id)
	}
	transitions := deref(l.Spec.LeaseTransitions)

	// The leader is cut off from the API server without stopping: it must step down once its
	// renew deadline passes, and another replica takes over once the lease expires.
	cut := time.Now()
	leader.net.cut.Store(true)
	for leader.c.Leading() && time.Since(cut) < 3*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	if leader.c.Leading() {
		t.Fatalf("%s still leads %s after losing the API server (renew deadline 1.5s)", since(cut), leader.id)
	}
	rest := slices.DeleteFunc(slices.Clone(rs), func(r *replica) bool { return r == leader })
	next := leaderOf(t, rest, 10*time.Second)
	if took := time.Since(cut); took < 1500*time.Millisecond {
		t.Errorf("%s took over %s after the leader was cut off, before its lease could have expired", next.id, took)
	}
	before := leader.acted.Load()
	offerFor(rs, time.Second)
	if leader.acted.Load() != before {
		t.Errorf("cut-off replica %s acted after stepping down", leader.id)
	}
	l = getLease(t, admin, ns, "certdrift-remediate")
	if got, want := deref(l.Spec.LeaseTransitions), transitions+1; got != want || deref(l.Spec.HolderIdentity) != next.id {
		t.Errorf("after takeover: holder %q transitions %d, want %s and %d", deref(l.Spec.HolderIdentity), got, next.id, want)
	}

	// Back on the network, the old leader stays a follower: the lease is someone else's.
	leader.net.cut.Store(false)
	offerFor(rs, time.Second)
	if leader.c.Leading() || leader.acted.Load() != before {
		t.Errorf("the old leader %s took the lease back from %s", leader.id, next.id)
	}

	// A clean stop releases the lease: the last replica takes over well before it would expire.
	stopped := time.Now()
	next.stop()
	if next.c.Leading() {
		t.Errorf("%s still leads after Run returned", next.id)
	}
	last := leaderOf(t, slices.DeleteFunc(slices.Clone(rs), func(r *replica) bool { return r == next }), 10*time.Second)
	if took := time.Since(stopped); took > 2*time.Second {
		t.Errorf("%s took over %s after %s stopped: the lease was not released (it lasts 3s)", last.id, took, next.id)
	}
}

func since(t time.Time) string { return time.Since(t).Round(time.Millisecond).String() }

func TestContinuousReleasesOnStop(t *testing.T) {
	tb := controlPlane(t)
	ns := testNamespace(t, tb)
	r := startReplica(t, ns, "only")
	leaderOf(t, []*replica{r}, 10*time.Second)
	r.stop()
	l := getLease(t, newClient(t, tb, nil), ns, "certdrift-remediate")
	if h := l.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("lease still held by %q after a clean stop", *h)
	}
}

// TestElectorOneWinner races three candidates for one Lease, absent and then expired, many
// times: each race has exactly one winner, the holder the Lease names.
func TestElectorOneWinner(t *testing.T) {
	tb := controlPlane(t)
	ns := testNamespace(t, tb)
	admin := newClient(t, tb, nil)
	leases := admin.CoordinationV1().Leases(ns)
	ctx := context.Background()
	const name = "race"
	var prevTransitions int32
	for round := range 12 {
		var es []*elector
		for i := range 3 {
			cfg := LeaseConfig{Client: newClient(t, tb, nil), Namespace: ns, Name: name, Identity: fmt.Sprintf("c%d", i)}
			es = append(es, newElector(cfg, 10*time.Second, slog.New(slog.DiscardHandler)))
		}
		absent := round == 0
		if !absent {
			// The previous winner's lease lapsed long ago.
			l, err := leases.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			old := metav1.NewMicroTime(time.Now().Add(-time.Minute))
			l.Spec.RenewTime, l.Spec.HolderIdentity = &old, ptr("gone")
			stale, err := leases.Update(ctx, l, metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			prevTransitions = deref(l.Spec.LeaseTransitions)
			// Every candidate has watched this version sit unchanged for a minute.
			for _, e := range es {
				e.observedRV, e.observedAt = stale.ResourceVersion, time.Now().Add(-time.Minute)
			}
		}
		var (
			start   = make(chan struct{})
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []string
		)
		for _, e := range es {
			wg.Go(func() {
				<-start
				ok, err := e.tryAcquireOrRenew(ctx, time.Now())
				if err != nil {
					t.Errorf("round %d: %s: %v", round, e.id, err)
				}
				if ok {
					mu.Lock()
					winners = append(winners, e.id)
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d (lease absent %v): winners %v, want exactly one", round, absent, winners)
		}
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantTransitions := int32(0)
		if !absent {
			wantTransitions = prevTransitions + 1
		}
		if deref(l.Spec.HolderIdentity) != winners[0] || deref(l.Spec.LeaseTransitions) != wantTransitions {
			t.Errorf("round %d: lease holder %q transitions %d, want %s and %d", round,
				deref(l.Spec.HolderIdentity), deref(l.Spec.LeaseTransitions), winners[0], wantTransitions)
		}
		if got := deref(l.Spec.LeaseDurationSeconds); got != 10 {
			t.Errorf("round %d: leaseDurationSeconds %d, want 10", round, got)
		}
		// A losing candidate keeps losing while the lease is fresh; the winner renews.
		for _, e := range es {
			ok, err := e.tryAcquireOrRenew(ctx, time.Now())
			if err != nil || ok != (e.id == winners[0]) {
				t.Errorf("round %d: second attempt of %s: holds %v (err %v), winner %s", round, e.id, ok, err, winners[0])
			}
		}
	}
}

func TestContinuousSkipsRoundsFromBeforeTheLastAction(t *testing.T) {
	tb := controlPlane(t)
	ns := testNamespace(t, tb)
	// Each action reports the round it acts on, then runs until the test lets it finish: the test
	// waits on these events rather than on sleeps guessing how long the loop takes.
	started := make(chan time.Time, 8)
	finish := make(chan struct{}, 8)
	c := &Continuous{
		Lease: testLease(newClient(t, tb, nil), ns, "a"),
		Act: func(ctx context.Context, w Work) {
			started <- w.Started
			select {
			case <-finish:
			case <-ctx.Done():
			}
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for !c.Leading() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !c.Leading() {
		t.Fatal("a lone replica never led")
	}
	next := func(what string) time.Time {
		t.Helper()
		select {
		case at := <-started:
			return at
		case <-time.After(5 * time.Second):
			t.Fatalf("no action %s within 5s", what)
			return time.Time{}
		}
	}
	old := time.Now()
	c.Offer(Work{Started: old})
	if got := next("on the first round"); !got.Equal(old) {
		t.Fatalf("acted on the round started %v, want %v", got, old)
	}
	// A round that starts while the action runs began before the action's end: stale.
	stale := time.Now()
	c.Offer(Work{Started: stale})
	finish <- struct{}{}
	// The loop takes the pending round once the action is over (and must skip it).
	takeBy := time.Now().Add(5 * time.Second)
	for c.hasPending() {
		if time.Now().After(takeBy) {
			t.Fatal("the round offered during the action was never taken")
		}
		time.Sleep(5 * time.Millisecond)
	}
	fresh := time.Now()
	c.Offer(Work{Started: fresh})
	if got := next("on the fresh round"); !got.Equal(fresh) {
		t.Errorf("acted on the round started %v, want the fresh one %v: the round started %v began during the action on %v, so it is stale", got, fresh, stale, old)
	}
	finish <- struct{}{}
}

// hasPending reports whether a round waits to be taken by the loop.
func (c *Continuous) hasPending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending != nil
}

func TestLeaseConfigValidate(t *testing.T) {
	// Validation fails before any request, so the client needs no server.
	c, err := kubeapi.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]LeaseConfig{
		"NoClient":              {Namespace: "n", Name: "l", Identity: "a"},
		"NoNamespace":           {Client: c, Name: "l", Identity: "a"},
		"NoIdentity":            {Client: c, Namespace: "n", Name: "l"},
		"RenewNotUnderDuration": {Client: c, Namespace: "n", Name: "l", Identity: "a", LeaseDuration: 5 * time.Second, RenewDeadline: 5 * time.Second},
		"RetryNotUnderRenew":    {Client: c, Namespace: "n", Name: "l", Identity: "a", RenewDeadline: time.Second, RetryPeriod: 2 * time.Second},
	}
	for name, l := range cases {
		t.Run(name, func(t *testing.T) {
			c := &Continuous{Lease: l, Act: func(context.Context, Work) {}}
			if err := c.Run(context.Background()); err == nil {
				t.Error("Run accepted an incomplete lease configuration")
			}
		})
	}
}

func TestLapsed(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	lease := func(renew time.Duration, secs *int32) *coordv1.Lease {
		m := metav1.NewMicroTime(now.Add(renew))
		return &coordv1.Lease{Spec: coordv1.LeaseSpec{RenewTime: &m, LeaseDurationSeconds: secs}}
	}
	cases := map[string]struct {
		reason   string
		lease    *coordv1.Lease
		observed time.Duration // before now
		want     bool
	}{
		"Fresh":           {reason: "unchanged for 5s of its 10s", lease: lease(-5*time.Second, ptr(int32(10))), observed: 5 * time.Second, want: false},
		"Lapsed":          {reason: "unchanged for 11s of its 10s", lease: lease(-11*time.Second, ptr(int32(10))), observed: 11 * time.Second, want: true},
		"OwnDurationUsed": {reason: "no duration on the lease: ours (15s) applies", lease: lease(-11*time.Second, nil), observed: 11 * time.Second, want: false},
		"HolderClockBehind": {reason: "a renewTime an hour old on the holder's clock, but just seen changing, is live",
			lease: lease(-time.Hour, ptr(int32(10))), observed: time.Second, want: false},
		"HolderClockAhead": {reason: "a renewTime in our future does not keep a lease that stopped changing alive",
			lease: lease(time.Hour, ptr(int32(10))), observed: 11 * time.Second, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := lapsed(tc.lease, now.Add(-tc.observed), now, 15*time.Second); got != tc.want {
				t.Errorf("%s: lapsed = %v, want %v", tc.reason, got, tc.want)
			}
		})
	}
}

func TestLeaseSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int32{0: 1, 500 * time.Millisecond: 1, time.Second: 1, 1500 * time.Millisecond: 2, 15 * time.Second: 15} {
		if got := leaseSeconds(d); got != want {
			t.Errorf("leaseSeconds(%s) = %d, want %d: a lease must not promise less than its holder assumes", d, got, want)
		}
	}
}
