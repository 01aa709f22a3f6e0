package remediate

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

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

// testLease paces elections; LeaseDuration−RenewDeadline is the margin between a cut-off leader
// stepping down and anyone else taking over. The durations pass on a fake clock: they cost no
// test time.
func testLease(c *kubeapi.Client, ns, id string) LeaseConfig {
	return LeaseConfig{Client: c, Namespace: ns, Name: "certdrift-remediate", Identity: id,
		LeaseDuration: 3 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}
}

func startReplica(t *testing.T, ns, id string, clk clock.Clock) *replica {
	t.Helper()
	tb := controlPlane(t)
	r := &replica{id: id, done: make(chan struct{}), net: &partition{}}
	r.c = &Continuous{
		Lease: testLease(newClient(t, tb, r.net), ns, id),
		Act:   func(context.Context, Work) { r.acted.Add(1) },
		Log:   slog.New(slog.DiscardHandler),
		Clock: clk,
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

// fakeTime drives the replicas' shared fake clock. A running replica, when it is not sending a
// request, waits on exactly one timer of that clock (its retry), so after each step the test
// waits until all of them wait again: every request a step caused has been answered by the API
// server before time moves on. Nothing in these tests sleeps for a duration of the election.
type fakeTime struct {
	t       *testing.T
	fc      *clocktesting.FakeClock
	running int
}

// settle waits until every running replica waits on the clock.
func (f *fakeTime) settle() {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.fc.Waiters() != f.running {
		if time.Now().After(deadline) {
			f.t.Fatalf("%d of %d replicas wait on the clock after 10s: a replica is stuck in a request", f.fc.Waiters(), f.running)
		}
		time.Sleep(time.Millisecond)
	}
}

// until steps the clock by step until cond holds (checked after each settled step), at most for
// limit of fake time, calling each after every step; it returns the fake time cond first held.
func (f *fakeTime) until(limit, step time.Duration, cond func() bool, each func()) time.Time {
	f.t.Helper()
	for end := f.fc.Now().Add(limit); ; {
		if cond() {
			return f.fc.Now()
		}
		if !f.fc.Now().Before(end) {
			f.t.Fatalf("condition not reached within %s of fake time", limit)
		}
		f.fc.Step(step)
		f.settle()
		if each != nil {
			each()
		}
	}
}

// run steps the clock by step for d of fake time, calling each after every settled step.
func (f *fakeTime) run(d, step time.Duration, each func()) {
	f.t.Helper()
	for end := f.fc.Now().Add(d); f.fc.Now().Before(end); {
		f.fc.Step(step)
		f.settle()
		each()
	}
}

func leaders(rs []*replica) []*replica {
	var out []*replica
	for _, r := range rs {
		if r.c.Leading() {
			out = append(out, r)
		}
	}
	return out
}

// oneLeader fails unless at most one of rs leads: the property the election exists for.
func oneLeader(t *testing.T, rs []*replica) {
	t.Helper()
	if l := leaders(rs); len(l) > 1 {
		t.Fatalf("%s and %s lead at once", l[0].id, l[1].id)
	}
}

// waitActed waits (on the real clock: the worker is a goroutine, not a timer) until r acted.
func waitActed(t *testing.T, r *replica, n int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.acted.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("leader %s acted %d times, want %d", r.id, r.acted.Load(), n)
		}
		time.Sleep(time.Millisecond)
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

// TestContinuousElection runs three replicas against the testbed's real API server (whose
// resourceVersion checks decide every race) on one fake clock: one leads and only it acts; a
// leader cut off from the API server steps down within its renew deadline and nobody takes over
// before its Lease could have expired; back online it stays a follower; a leader that stops
// releases the Lease, so the next takes over at its next attempt. Each time is asserted on the
// fake clock, exactly, whatever the machine's load.
func TestContinuousElection(t *testing.T) {
	tb := controlPlane(t)
	ns := testNamespace(t, tb)
	admin := newClient(t, tb, nil)
	fc := clocktesting.NewFakeClock(time.Now())
	clk := &fakeTime{t: t, fc: fc, running: 3}
	rs := []*replica{startReplica(t, ns, "a", fc), startReplica(t, ns, "b", fc), startReplica(t, ns, "c", fc)}
	cfg := testLease(nil, ns, "")
	retry, renew, duration := cfg.RetryPeriod, cfg.RenewDeadline, cfg.LeaseDuration
	step := retry / 10

	// The first attempts race to create the Lease: exactly one wins, at once.
	clk.settle()
	ls := leaders(rs)
	if len(ls) != 1 {
		t.Fatalf("%d leaders after the first attempts, want 1", len(ls))
	}
	leader := ls[0]
	for _, r := range rs {
		r.c.Offer(Work{Started: fc.Now()})
	}
	waitActed(t, leader, 1)
	// It keeps the lead for longer than a lease, renewing; only it acts.
	clk.run(2*duration, step, func() {
		oneLeader(t, rs)
		if !leader.c.Leading() {
			t.Fatalf("%s lost the lead while connected", leader.id)
		}
	})
	for _, r := range rs {
		if r != leader && r.acted.Load() != 0 {
			t.Errorf("follower %s acted %d times while %s led", r.id, r.acted.Load(), leader.id)
		}
	}
	l := getLease(t, admin, ns, "certdrift-remediate")
	if got := deref(l.Spec.HolderIdentity); got != leader.id {
		t.Errorf("lease holder %q, want the leader %s", got, leader.id)
	}
	transitions := deref(l.Spec.LeaseTransitions)

	// Cut off without stopping, the leader steps down once no renew succeeded for the renew
	// deadline; its last renew was at most one retry before the cut.
	cut := fc.Now()
	leader.net.cut.Store(true)
	others := slices.DeleteFunc(slices.Clone(rs), func(r *replica) bool { return r == leader })
	down := clk.until(2*renew, step, func() bool { return !leader.c.Leading() }, func() { oneLeader(t, rs) })
	if d := down.Sub(cut); d > renew+retry || d < renew-retry {
		t.Errorf("the cut-off leader stepped down %s after the cut, want within the renew deadline %s (± one retry %s)", d, renew, retry)
	}
	// Nobody takes over before the Lease could have expired: it was renewed at most one retry
	// before the cut and lasts LeaseDuration from then.
	took := clk.until(2*duration, step, func() bool { return len(leaders(others)) == 1 }, func() { oneLeader(t, rs) })
	next := leaders(others)[0]
	if d := took.Sub(cut); d <= duration-retry || d > duration+3*retry {
		t.Errorf("%s took over %s after the cut, want after the lease duration %s (within three retries)", next.id, d, duration)
	}
	before := leader.acted.Load()
	for _, r := range rs {
		r.c.Offer(Work{Started: fc.Now()})
	}
	waitActed(t, next, 1)
	if leader.acted.Load() != before {
		t.Errorf("cut-off replica %s acted after stepping down", leader.id)
	}
	l = getLease(t, admin, ns, "certdrift-remediate")
	if got, want := deref(l.Spec.LeaseTransitions), transitions+1; got != want || deref(l.Spec.HolderIdentity) != next.id {
		t.Errorf("after takeover: holder %q transitions %d, want %s and %d", deref(l.Spec.HolderIdentity), got, next.id, want)
	}

	// Back on the network, the old leader stays a follower: the Lease is renewed by another.
	leader.net.cut.Store(false)
	clk.run(duration, step, func() {
		oneLeader(t, rs)
		if leader.c.Leading() {
			t.Fatalf("the old leader %s took the lease back from %s", leader.id, next.id)
		}
	})

	// A clean stop releases the Lease: the last replica takes over at its next attempt, long
	// before the Lease would have expired.
	next.stop()
	clk.running--
	clk.settle()
	if next.c.Leading() {
		t.Errorf("%s still leads after Run returned", next.id)
	}
	stopped := fc.Now()
	rest := slices.DeleteFunc(slices.Clone(rs), func(r *replica) bool { return r == next })
	took = clk.until(duration, step, func() bool { return len(leaders(rest)) == 1 }, func() { oneLeader(t, rs) })
	if d := took.Sub(stopped); d > retry+retry/5+step {
		t.Errorf("%s took over %s after %s stopped, want at its next attempt (retry %s): the lease was not released", leaders(rest)[0].id, d, next.id, retry)
	}
}

// TestContinuousReleasesOnStop: a lone replica leads at once and, stopped, leaves the Lease
// without a holder (real API server, fake clock).
func TestContinuousReleasesOnStop(t *testing.T) {
	tb := controlPlane(t)
	ns := testNamespace(t, tb)
	fc := clocktesting.NewFakeClock(time.Now())
	clk := &fakeTime{t: t, fc: fc, running: 1}
	r := startReplica(t, ns, "only", fc)
	clk.settle()
	if !r.c.Leading() {
		t.Fatal("a lone replica does not lead after its first attempt")
	}
	if h := deref(getLease(t, newClient(t, tb, nil), ns, "certdrift-remediate").Spec.HolderIdentity); h != "only" {
		t.Fatalf("lease held by %q while leading, want only", h)
	}
	r.stop()
	l := getLease(t, newClient(t, tb, nil), ns, "certdrift-remediate")
	if h := l.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("lease still held by %q after a clean stop", *h)
	}
}

// TestElectorOneWinner is the elector against the real API server alone (no clock involved):
// it races three candidates for one Lease, absent and then expired, many
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
			es = append(es, newElector(cfg, 10*time.Second, slog.New(slog.DiscardHandler), clock.RealClock{}))
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

// leadsAlways is an Elector that leads at once and until stopped: Continuous's gating of rounds
// tested without an election.
type leadsAlways struct{ clk clock.Clock }

func (l leadsAlways) Acquire(ctx context.Context) (time.Time, bool) {
	return l.clk.Now(), ctx.Err() == nil
}
func (leadsAlways) Hold(ctx context.Context, _ time.Time) error {
	<-ctx.Done()
	return ctx.Err()
}
func (leadsAlways) Release(context.Context) error { return nil }

// TestContinuousSkipsRoundsFromBeforeTheLastAction: a round that began before the leader's last
// action ended may show pods already replaced, so it is not acted on; the next fresh one is.
// Times are a fake clock's, the election a stand-in (Elector): no API server needed.
func TestContinuousSkipsRoundsFromBeforeTheLastAction(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	// Each action reports the round it acts on, then runs until the test lets it finish.
	started := make(chan time.Time, 8)
	finish := make(chan struct{}, 8)
	c := &Continuous{
		Elector: leadsAlways{fc},
		Clock:   fc,
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
	for deadline := time.Now().Add(10 * time.Second); !c.Leading(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("never led")
		}
	}
	next := func(what string) time.Time {
		t.Helper()
		select {
		case at := <-started:
			return at
		case <-time.After(10 * time.Second):
			t.Fatalf("no action %s", what)
			return time.Time{}
		}
	}
	old := fc.Now()
	c.Offer(Work{Started: old})
	if got := next("on the first round"); !got.Equal(old) {
		t.Fatalf("acted on the round started %v, want %v", got, old)
	}
	// A round that starts while the action runs began before the action's end: stale.
	fc.Step(time.Second)
	stale := fc.Now()
	c.Offer(Work{Started: stale})
	fc.Step(time.Second)
	finish <- struct{}{}
	// The loop takes the pending round once the action is over (and must skip it).
	for deadline := time.Now().Add(10 * time.Second); c.hasPending(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the round offered during the action was never taken")
		}
	}
	fc.Step(time.Second)
	fresh := fc.Now()
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
