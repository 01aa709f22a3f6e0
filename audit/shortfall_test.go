package audit

import "testing"

// TestCoverageShortfall: the one-line account of an incomplete report (audit's exit-1 message),
// each count in its place, singular and plural.
func TestCoverageShortfall(t *testing.T) {
	cases := map[string]struct {
		c    Coverage
		want string
	}{
		"Plural":   {Coverage{BindingsJudged: 3, Bindings: 4, HandshakesJudged: 5, Handshakes: 6, Gaps: 2}, "judged 3 of 4 bindings and 5 of 6 handshakes, 2 inputs not read"},
		"Singular": {Coverage{BindingsJudged: 0, Bindings: 1, HandshakesJudged: 1, Handshakes: 1, Gaps: 1}, "judged 0 of 1 binding and 1 of 1 handshake, 1 input not read"},
		"Nothing":  {Coverage{}, "judged 0 of 0 bindings and 0 of 0 handshakes, 0 inputs not read"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.c.Shortfall(); got != tc.want {
				t.Errorf("Shortfall() = %q, want %q", got, tc.want)
			}
		})
	}
}
