package remediate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/pki"
)

// Observer gathers the named Envoys (Kubernetes: "namespace/pod") again for a post-check: the
// three views of one round, as the audit gathers them. It may return more Envoys than asked
// for; CheckConverged looks at the named ones only.
//
// This is the seam for the scoped gather (issue 17 item 1): in Kubernetes mode the observer
// today is a whole round of the audit's own session (every Envoy of the fleet, to verify one
// pod); the gather package's one-pod scope replaces it without changing the repair.
type Observer func(ctx context.Context, envoys []string) audit.Inputs

// NewVerifier is the post-check of every strategy: observe the Envoys again, judge them with the
// audit's policy at now, and CheckConverged.
func NewVerifier(observe Observer, policy config.Policy, now func() time.Time) Verifier {
	if now == nil {
		now = time.Now
	}
	return func(ctx context.Context, _ Action, envoys []string) (string, error) {
		in := observe(ctx, envoys)
		return CheckConverged(in, audit.Run(in, policy, now()), envoys)
	}
}

// CheckConverged is the post-check's verdict on a fresh audit: every named Envoy was observed,
// each of its bindings is converged, none of its findings says stale or unreachable
// (notConvergedCodes), and every handshake returned the desired leaf of a bound source. It
// returns what it saw.
func CheckConverged(in audit.Inputs, rep audit.Report, envoys []string) (string, error) {
	desired := map[string][]string{} // source → desired leaf fingerprints (one per merged item)
	for _, o := range in.Desired {
		for _, it := range o.Items {
			if fp := it.LeafFingerprint(); fp != "" {
				name := o.Ref.String()
				desired[name] = append(desired[name], fp)
			}
		}
	}
	var saw []string
	for _, name := range envoys {
		i := slices.IndexFunc(in.Envoys, func(ev audit.EnvoyView) bool { return ev.Config.Name == name })
		if i < 0 {
			return "", fmt.Errorf("%s not observed yet", name)
		}
		ev := in.Envoys[i]
		for _, f := range rep.Findings {
			if f.Subject.Envoy == name && slices.Contains(notConvergedCodes, f.Code) {
				return "", fmt.Errorf("%s: %s: %s", name, f.Code, f.Message)
			}
		}
		var bound []string
		for _, b := range rep.Bindings {
			if b.Envoy != name {
				continue
			}
			if b.State != audit.StateConverged {
				return "", fmt.Errorf("%s: binding to %s is %s", name, b.Source, b.State)
			}
			bound = append(bound, b.Source)
		}
		if len(bound) == 0 {
			return "", fmt.Errorf("%s: no certificate binding observed yet", name)
		}
		served := 0
		for _, res := range ev.Served {
			if len(res.Chain) == 0 {
				return "", fmt.Errorf("%s: handshake with %s (SNI %q) failed: %s", name, res.Target.Address, res.Target.SNI, res.Reason)
			}
			fp := pki.Fingerprint(res.Chain[0])
			ok := false
			for _, s := range bound {
				ok = ok || slices.Contains(desired[s], fp)
			}
			if !ok {
				return "", fmt.Errorf("%s: %s serves sha256 %s, not the desired certificate of %s", name, res.Target.Address, short(fp), strings.Join(bound, ", "))
			}
			served++
		}
		saw = append(saw, fmt.Sprintf("%s serves the desired leaf of %s (sha256 %s) in %d handshakes",
			name, strings.Join(bound, ", "), short(firstOr(desired[bound[0]])), served))
	}
	return strings.Join(saw, "; "), nil
}

func firstOr(xs []string) string {
	if len(xs) == 0 {
		return "?"
	}
	return xs[0]
}

func short(fp string) string {
	if len(fp) > 16 {
		return fp[:16]
	}
	return fp
}
