package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/test/atomicdir"
)

// TestSiblingSecretsForOneHost: two Secrets hold leaves for the same host (two cert-manager
// Certificates, a blue/green pair), and a real static-context Envoy reads only the first, whose
// leaf it has not reloaded since the rotation. certdrift must judge that Envoy stale for the
// first Secret only: its old leaf is no copy of the sibling, by inference (no binding names the
// sibling) or by a binding that names the sibling's directory without the Envoy reading it.
func TestSiblingSecretsForOneHost(t *testing.T) {
	w := newWorld(t)
	old, cur, sibling := w.leaf(t, "web old"), w.leaf(t, "web"), w.leaf(t, "web sibling")
	w.write(t, old.CertPEM, old.KeyPEM)
	e := w.startStatic(t)
	w.write(t, cur.CertPEM, cur.KeyPEM) // rotated; the static context keeps the old leaf
	siblingDir := filepath.Join(t.TempDir(), "sibling")
	if err := os.MkdirAll(siblingDir, 0o755); err != nil {
		t.Fatal(err)
	}
	w.keys = append(w.keys, sibling.KeyPEM)
	if err := atomicdir.Write(siblingDir, map[string][]byte{"tls.crt": sibling.CertPEM, "tls.key": sibling.KeyPEM}); err != nil {
		t.Fatal(err)
	}
	desired := fmt.Sprintf("desired:\n  - name: web\n    dir: %s\n  - name: sibling\n    dir: %s\n", w.secretDir, siblingDir)
	policy := "policy:\n  grace: 1ms\n"
	for _, tc := range []struct {
		name, bindings string
		want           map[string]string // source → binding state
	}{
		{name: "inferred", want: map[string]string{"web": audit.StateStale}},
		{name: "both bound", bindings: fmt.Sprintf("\n    bindings:\n      - source: web\n        file: %s\n      - source: sibling\n        file: %s",
			filepath.Join(w.secretDir, "tls.crt"), filepath.Join(siblingDir, "tls.crt")),
			want: map[string]string{"web": audit.StateStale, "sibling": audit.StateUnknown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeConfig(t, desired+"envoys:"+envoyEntry(t, "static", e)+tc.bindings+"\n"+policy)
			_, r := auditJSON(t, cfg)
			states := map[string]string{}
			for _, b := range r.Bindings {
				if b.Envoy == "static" && !b.Trust {
					states[b.Source] = b.State
				}
			}
			if fmt.Sprint(states) != fmt.Sprint(tc.want) {
				t.Errorf("bindings %v, want %v:%s", states, tc.want, describe(r))
			}
			stale := map[string]bool{}
			for _, f := range r.Findings {
				if f.Code == audit.StaleLoaded || f.Code == audit.StaleServed {
					stale[f.Subject.Source] = true
				}
			}
			if !stale["web"] || stale["sibling"] {
				t.Errorf("stale findings for %v, want web only (the Envoy never read the sibling):%s", stale, describe(r))
			}
		})
	}
}
