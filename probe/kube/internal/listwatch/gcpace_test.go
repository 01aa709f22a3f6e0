package listwatch

import (
	"runtime/debug"
	"testing"
)

func TestLowerGCForList(t *testing.T) {
	orig := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(orig) })
	cases := map[string]struct {
		reason      string
		setting     int
		percent     int
		lists       int // concurrent lists
		wantDuring  int
		wantBetween int // after all but the last restored
	}{
		"Lowered":      {reason: "the default GOGC=100 is lowered while the list runs", setting: 100, percent: 50, lists: 1, wantDuring: 50},
		"AlreadyLower": {reason: "an operator's lower GOGC is never raised", setting: 20, percent: 50, lists: 1, wantDuring: 20},
		"GCOff":        {reason: "GOGC=off is the operator's choice: the list does not turn the GC on", setting: -1, percent: 50, lists: 1, wantDuring: -1},
		"Disabled":     {reason: "percent 0 leaves the GC alone", setting: 100, percent: 0, lists: 1, wantDuring: 100},
		"Concurrent":   {reason: "one informer per namespace: the setting comes back when the last list ends", setting: 200, percent: 50, lists: 3, wantDuring: 50, wantBetween: 50},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			debug.SetGCPercent(tc.setting)
			var restores []func()
			for range tc.lists {
				restores = append(restores, LowerGCForList(tc.percent))
			}
			if got := gcPercent(); got != tc.wantDuring {
				t.Errorf("%s\nduring the list: GC percent %d, want %d", tc.reason, got, tc.wantDuring)
			}
			for i, r := range restores {
				r()
				r() // idempotent
				if i < len(restores)-1 {
					if got := gcPercent(); got != tc.wantBetween {
						t.Errorf("%s\nafter %d of %d lists: GC percent %d, want %d", tc.reason, i+1, len(restores), got, tc.wantBetween)
					}
				}
			}
			if got := gcPercent(); got != tc.setting {
				t.Errorf("%s\nafter the lists: GC percent %d, want %d restored", tc.reason, got, tc.setting)
			}
		})
	}
}

// gcPercent reads the current setting (SetGCPercent is the only reader).
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}
