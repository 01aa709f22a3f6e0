package audit

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeClock is the Tracker's injected time: rounds are placed on it by hand.
type fakeClock struct{ now time.Time }

func (c *fakeClock) advance(d time.Duration) time.Time { c.now = c.now.Add(d); return c.now }

// trackStep is one round of one binding ("gw" bound to "web"): the desired leaf, the verdict, and
// how long after the previous round it ends.
type trackStep struct {
	desired string
	state   string
	after   time.Duration
	// changedAt, relative to the start of the test's clock; zero means unknown.
	changedAt time.Duration
	gone      bool // the binding is not in the round (Envoy or source deleted)
}

func TestTrackerNext(t *testing.T) {
	start := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	key := TrackKey{Envoy: "gw", Source: "web"}
	cases := map[string]struct {
		reason string
		steps  []trackStep
		// What the last round shows.
		wantConverged  []time.Duration // every observation over all rounds
		wantConverging int
		wantStaleSince time.Duration // -1: not stale
		wantClock      bool
	}{
		"NoRotationNoObservation": {
			reason:         "a binding converged from the start never observes",
			steps:          []trackStep{{desired: "v1", state: StateConverged}, {desired: "v1", state: StateConverged, after: 10 * time.Second}},
			wantStaleSince: -1, wantClock: true,
		},
		"ObservesOncePerRotation": {
			reason: "the clock starts when the desired fingerprint changes (no change time: the round's time)",
			steps: []trackStep{{desired: "v1", state: StateConverged}, {desired: "v2", state: StateConverging, after: 10 * time.Second},
				{desired: "v2", state: StateConverged, after: 5 * time.Second}, {desired: "v2", state: StateConverged, after: 5 * time.Second}},
			wantConverged: []time.Duration{5 * time.Second}, wantStaleSince: -1, wantClock: true,
		},
		"SecondRotationWhileConvergingRestartsTheClock": {
			reason: "v3 replaces v2 before the Envoy loaded v2: one observation, timed from v3",
			steps: []trackStep{{desired: "v1", state: StateConverged}, {desired: "v2", state: StateConverging, after: 10 * time.Second},
				{desired: "v3", state: StateConverging, after: 10 * time.Second}, {desired: "v3", state: StateConverged, after: 6 * time.Second}},
			wantConverged: []time.Duration{6 * time.Second}, wantStaleSince: -1, wantClock: true,
		},
		"ConvergedInTheSameRound": {
			reason:        "an Envoy faster than the round still observes, with the round's time",
			steps:         []trackStep{{desired: "v1", state: StateConverged}, {desired: "v2", state: StateConverged, after: 10 * time.Second}},
			wantConverged: []time.Duration{0}, wantStaleSince: -1, wantClock: true,
		},
		"RotationDatedByTheChangeTime": {
			reason: "the desired change time (5s after the start) dates the rotation, not the round that saw it",
			steps: []trackStep{{desired: "v1", state: StateConverged}, {desired: "v2", state: StateConverging, after: 10 * time.Second, changedAt: 5 * time.Second},
				{desired: "v2", state: StateConverged, after: 20 * time.Second, changedAt: 5 * time.Second}},
			wantConverged: []time.Duration{25 * time.Second}, wantStaleSince: -1, wantClock: true,
		},
		"StaleSinceTheChange": {
			reason: "converging then stale: drift dates from the change time and the rotation is still pending",
			steps: []trackStep{{desired: "v1", state: StateConverged}, {desired: "v2", state: StateConverging, after: 10 * time.Second, changedAt: 5 * time.Second},
				{desired: "v2", state: StateStale, after: 20 * time.Second, changedAt: 5 * time.Second}},
			wantConverging: 1, wantStaleSince: 5 * time.Second, wantClock: true,
		},
		"FirstRoundAfterTheRotation": {
			reason:         "a process starting after the rotation dates the drift from the source's change time (before the process started)",
			steps:          []trackStep{{desired: "v2", state: StateStale, after: 10 * time.Minute, changedAt: time.Minute}},
			wantConverging: 1, wantStaleSince: time.Minute, wantClock: true,
		},
		"ChangeTimeInTheFuture": {
			reason:         "a change time ahead of the clock cannot date anything: the round does",
			steps:          []trackStep{{desired: "v2", state: StateStale, after: time.Minute, changedAt: time.Hour}},
			wantConverging: 1, wantStaleSince: time.Minute, wantClock: true,
		},
		"ChangeTimeBeforeLastConverged": {
			reason: "an mtime older than the last converged round (a copy kept it) would inflate the time: the round that saw it does",
			steps: []trackStep{{desired: "v1", state: StateConverged, after: time.Minute},
				{desired: "v1", state: StateStale, after: time.Minute, changedAt: -time.Second}},
			wantConverging: 1, wantStaleSince: 2 * time.Minute, wantClock: true,
		},
		"UnknownKeepsTheClock": {
			reason: "an unreachable Envoy neither converges nor stops the pending rotation",
			steps: []trackStep{{desired: "v1", state: StateConverged}, {desired: "v2", state: StateConverging, after: 10 * time.Second},
				{desired: "v2", state: StateUnknown, after: 10 * time.Second}},
			wantConverging: 1, wantStaleSince: -1, wantClock: true,
		},
		"DeletedBindingLosesItsClocks": {
			reason: "a binding absent from a round is forgotten: its rotation neither converges nor stays pending",
			steps: []trackStep{{desired: "v1", state: StateConverged}, {desired: "v2", state: StateConverging, after: 10 * time.Second},
				{gone: true, after: 10 * time.Second}, {desired: "v2", state: StateConverged, after: 10 * time.Second}},
			wantStaleSince: -1, wantClock: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clock := &fakeClock{now: start}
			var tr Tracker
			var got []time.Duration
			var last Progress
			for _, st := range tc.steps {
				roundStart := clock.now
				now := clock.advance(st.after)
				r := TrackRound{Started: roundStart, Now: now}
				if !st.gone {
					d := DesiredSource{Source: "web", Leaves: map[string]string{"": st.desired}}
					if st.changedAt != 0 {
						d.ChangedAt = start.Add(st.changedAt)
					}
					r.Desired = []DesiredSource{d}
					r.Bindings = []Binding{{Envoy: "gw", Source: "web", State: st.state}}
				}
				tr, last = tr.Next(r)
				got = append(got, last.Converged...)
			}
			if diff := cmp.Diff(tc.wantConverged, got); diff != "" {
				t.Errorf("%s: convergence observations (-want +got):\n%s", tc.reason, diff)
			}
			if last.Converging != tc.wantConverging {
				t.Errorf("%s: converging %d, want %d", tc.reason, last.Converging, tc.wantConverging)
			}
			switch {
			case tc.wantStaleSince < 0 && len(last.Stale) != 0:
				t.Errorf("%s: stale %v, want none", tc.reason, last.Stale)
			case tc.wantStaleSince >= 0 && (len(last.Stale) != 1 || !last.Stale[0].Since.Equal(start.Add(tc.wantStaleSince))):
				t.Errorf("%s: stale %v, want one since start+%s", tc.reason, last.Stale, tc.wantStaleSince)
			}
			if _, ok := tr.Clock(key); ok != tc.wantClock {
				t.Errorf("%s: clock kept %v, want %v", tc.reason, ok, tc.wantClock)
			}
		})
	}
}

// TestTrackerIsAValue: Next leaves the Tracker it was called on as it was, so a reader holding
// the previous one sees a consistent state while the next round advances.
func TestTrackerIsAValue(t *testing.T) {
	start := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	key := TrackKey{Envoy: "gw", Source: "web"}
	round := func(fp, state string, at time.Time) TrackRound {
		return TrackRound{Now: at, Desired: []DesiredSource{{Source: "web", Leaves: map[string]string{"": fp}}},
			Bindings: []Binding{{Envoy: "gw", Source: "web", State: state}}}
	}
	t1, _ := Tracker{}.Next(round("v1", StateConverged, start))
	before, _ := t1.Clock(key)
	t2, p := t1.Next(round("v2", StateStale, start.Add(time.Minute)))
	if after, _ := t1.Clock(key); after != before {
		t.Errorf("Next modified its receiver: clock %+v, was %+v", after, before)
	}
	c2, _ := t2.Clock(key)
	if c2.Desired != "v2" || !c2.DriftSince.Equal(start.Add(time.Minute)) || len(p.Stale) != 1 {
		t.Errorf("the new Tracker did not advance: %+v, progress %+v", c2, p)
	}
}
