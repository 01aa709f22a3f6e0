package remediate

import (
	"strings"
	"testing"
)

func TestElectionIdentity(t *testing.T) {
	t.Setenv("POD_NAME", "certdrift-0")
	a, err := ElectionIdentity("")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ElectionIdentity("")
	if a == b || !strings.HasPrefix(a, "certdrift-0_") {
		t.Errorf("identities %q and %q: want distinct, from POD_NAME", a, b)
	}
	if id, _ := ElectionIdentity("given"); id != "given" {
		t.Errorf("explicit identity %q, want given", id)
	}
}
