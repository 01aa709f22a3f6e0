package standalone

import (
	"os"
	"slices"
	"testing"
)

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		body     func(r *Runner)
		keep     bool
		wantCode int
	}{
		{name: "Returns", body: func(*Runner) {}, wantCode: 0},
		{name: "Fatal", body: func(r *Runner) { r.Fatalf("boom %d", 1); t.Error("Fatalf returned") }, wantCode: 3},
		{name: "Kept", body: func(*Runner) {}, keep: true, wantCode: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New("standalone-test")
			r.Keep = tc.keep
			var order []int
			r.Cleanup(func() { order = append(order, 1) })
			r.Cleanup(func() { order = append(order, 2) })
			sub := r.TempDir()
			code := r.Run(func() { tc.body(r) }, 3)
			if code != tc.wantCode {
				t.Errorf("code %d, want %d", code, tc.wantCode)
			}
			if r.Failed() != (tc.wantCode != 0) {
				t.Errorf("Failed() = %v after code %d", r.Failed(), code)
			}
			if !slices.Equal(order, []int{2, 1}) {
				t.Errorf("cleanups ran in order %v, want [2 1]", order)
			}
			_, err := os.Stat(sub)
			if tc.keep {
				if err != nil {
					t.Errorf("Keep set, but %s is gone: %v", sub, err)
				}
				os.RemoveAll(r.Dir())
			} else if !os.IsNotExist(err) {
				t.Errorf("%s left behind (%v)", sub, err)
			}
		})
	}
}
