package remediate

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

// replica is one Continuous with a counting ActFunc.
type replica struct {
	c      *Continuous
	acted  atomic.Int32
	cancel context.CancelFunc
	done   chan struct{}
}

func startReplica(t *testing.T, client *fake.Clientset, id string) *replica {
	t.Helper()
	r := &replica{done: make(chan struct{})}
	r.c = &Continuous{
		Lease: LeaseConfig{Client: client, Namespace: "certdrift", Name: "certdrift-remediate", Identity: id,
			LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond},
		Act: func(context.Context, Work) { r.acted.Add(1) },
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

// offerUntil offers rounds to every replica until cond holds or the deadline passes.
func offerUntil(t *testing.T, rs []*replica, d time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, r := range rs {
			r.c.Offer(Work{Started: time.Now()})
		}
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func TestContinuousOnlyLeaderActs(t *testing.T) {
	client := fake.NewClientset()
	a, b := startReplica(t, client, "a"), startReplica(t, client, "b")
	rs := []*replica{a, b}

	if !offerUntil(t, rs, 10*time.Second, func() bool { return a.acted.Load()+b.acted.Load() >= 5 }) {
		t.Fatalf("no replica acted within 10s (a %d, b %d)", a.acted.Load(), b.acted.Load())
	}
	// Keep offering for longer than a lease: the follower must never act.
	offerUntil(t, rs, 2*time.Second, func() bool { return false })
	leader, follower := a, b
	if b.acted.Load() > 0 {
		leader, follower = b, a
	}
	if follower.acted.Load() != 0 || !leader.c.Leading() || follower.c.Leading() {
		t.Fatalf("both replicas acted or led: a acted %d leading %v, b acted %d leading %v",
			a.acted.Load(), a.c.Leading(), b.acted.Load(), b.c.Leading())
	}

	// The leader stops (and releases the Lease): the other takes over, and only it acts now.
	leader.cancel()
	<-leader.done
	before := leader.acted.Load()
	if !offerUntil(t, rs, 10*time.Second, func() bool { return follower.acted.Load() > 0 }) {
		t.Fatalf("the follower never took over after the leader stopped")
	}
	if leader.acted.Load() != before || leader.c.Leading() {
		t.Errorf("the stopped replica acted after it stopped (%d → %d) or still leads", before, leader.acted.Load())
	}
}

func TestContinuousSkipsRoundsFromBeforeTheLastAction(t *testing.T) {
	client := fake.NewClientset()
	var mu sync.Mutex
	var seen []time.Time
	c := &Continuous{
		Lease: LeaseConfig{Client: client, Namespace: "certdrift", Name: "l", Identity: "a",
			LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond},
		Act: func(_ context.Context, w Work) {
			mu.Lock()
			seen = append(seen, w.Started)
			mu.Unlock()
			time.Sleep(200 * time.Millisecond)
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
	old := time.Now()
	c.Offer(Work{Started: old})
	time.Sleep(50 * time.Millisecond) // the action is running
	c.Offer(Work{Started: old.Add(10 * time.Millisecond)})
	time.Sleep(400 * time.Millisecond)
	fresh := time.Now()
	c.Offer(Work{Started: fresh})
	time.Sleep(400 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || !seen[0].Equal(old) || !seen[1].Equal(fresh) {
		t.Errorf("acted on rounds started %v, want only %v and %v: a round that began during an action is stale", seen, old, fresh)
	}
}

func TestLeaseConfigValidate(t *testing.T) {
	cases := map[string]LeaseConfig{
		"NoClient":    {Namespace: "n", Name: "l", Identity: "a"},
		"NoNamespace": {Client: fake.NewClientset(), Name: "l", Identity: "a"},
		"NoIdentity":  {Client: fake.NewClientset(), Namespace: "n", Name: "l"},
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
