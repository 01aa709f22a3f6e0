package remediate

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
)

// TestOnceLocal: one round's repair outside Kubernetes. A dry run plans the exec strategy for
// the stale Envoy and neither runs the command nor observes; acting runs the command, then the
// post-check observes that Envoy again through Observe (here it never shows up converged, so the
// action fails) and the result is counted.
func TestOnceLocal(t *testing.T) {
	report := audit.Report{Findings: []audit.Finding{finding(audit.StaleServed, "edge", "web")}}
	in := audit.Inputs{Envoys: []audit.EnvoyView{{Config: config.Envoy{Name: "edge", Admin: "http://127.0.0.1:9901"}}}}
	marker := filepath.Join(t.TempDir(), "ran")
	var mu sync.Mutex
	var observed [][]string
	c := OnceConfig{
		Policy:  Policy{Strategy: string(Exec), Budget: 5, Timeout: time.Second},
		Command: []string{"touch", marker},
		Observe: func(_ context.Context, envoys []string) audit.Inputs {
			mu.Lock()
			defer mu.Unlock()
			observed = append(observed, envoys)
			return audit.Inputs{}
		},
		AuditPolicy: config.DefaultPolicy,
	}

	dry := c
	dry.DryRun = true
	rec := &recorder{}
	dry.Metrics = rec
	results, err := Once(context.Background(), dry, report, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || results[0].Strategy != Exec || results[0].Target.Envoy != "edge" || results[0].Outcome != OutcomePlanned {
		t.Fatalf("dry run: %+v, want one exec action on edge, planned", results)
	}
	if _, err := os.Stat(marker); err == nil || len(observed) > 0 {
		t.Fatalf("the dry run ran the command (%v) or observed %v", err, observed)
	}
	if !slices.Equal(rec.lines, []string{"exec planned false"}) {
		t.Errorf("dry run counted %q, want one planned exec", rec.lines)
	}

	rec = &recorder{}
	c.Metrics = rec
	results, err = Once(context.Background(), c, report, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || results[0].Outcome != OutcomeFailed || !strings.Contains(results[0].Detail, "edge") {
		t.Fatalf("acting: %+v, want edge failed by its post-check", results)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the command did not run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(observed) == 0 || !slices.Equal(observed[0], []string{"edge"}) {
		t.Errorf("the post-check observed %v, want edge", observed)
	}
	if !slices.Equal(rec.lines, []string{"exec failed true"}) {
		t.Errorf("acting counted %q, want one attempted exec that failed", rec.lines)
	}
}
