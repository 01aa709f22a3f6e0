package audit

import (
	"fmt"
	"time"

	"github.com/certdrift/certdrift/config"
)

// checkPairings verifies each declared peer pairing: the trust bundle of one source must verify
// the leaf of another. This is the check that catches a CA rotation rolled out to leaves before
// the peers' bundles (Envoy Gateway #4891).
func (a *auditor) checkPairings() {
	for _, p := range a.cfg.Pairings {
		bundle := a.desired.lookup(p.Bundle.Source, p.Bundle.Item)
		leaf := a.desired.lookup(p.Leaf.Source, p.Leaf.Item)
		for _, missing := range []struct {
			d   *desiredCert
			ref config.Ref
			as  string
		}{{bundle, p.Bundle, "bundle"}, {leaf, p.Leaf, "leaf"}} {
			if missing.d == nil {
				a.reportMissingSource(Subject{Source: missing.ref.Source, Item: missing.ref.Item},
					fmt.Sprintf("pairing %s names %s as its %s, which was not found", pairName(p), refName(missing.ref.Source, missing.ref.Item), missing.as))
			}
		}
		if bundle == nil || leaf == nil || leaf.leafX() == nil {
			continue // unreadable sources have PARSE_ERROR findings, missing ones SOURCE_MISSING
		}
		ca := bundle.x().CA
		where := bundle.it.CAPath
		if len(ca) == 0 {
			// A source that only holds a bundle may keep it in its certificate file.
			ca, where = bundle.x().Chain, bundle.it.CertPath
		}
		s := Subject{Source: p.Leaf.Source, Item: p.Leaf.Item, File: where}
		if len(ca) == 0 {
			a.add(Finding{Code: CABundleGap, Severity: Critical, Subject: s,
				Message: fmt.Sprintf("pairing %s: source %s has no CA bundle to verify %s with", pairName(p), p.Bundle.Source, leaf.name()),
				Advice:  "point the pairing's bundle at a source with a CA file"})
			continue
		}
		// Within the grace period of the change that opened it, a gap is the window every
		// rotation of one side has until the other side's Secret follows.
		sev := Critical
		if changed := later(bundle.changedAt, leaf.changedAt); !changed.IsZero() && a.now.Sub(changed) <= a.policy.Grace.D() {
			sev = Warning
		}
		a.checkBundleCovers(s, sev, ca, leaf.leafX(), leaf.x().Chain[1:], fmt.Sprintf("pairing %s: the trust bundle of %s (%s)", pairName(p), bundle.name(), where))
	}
}

func pairName(p config.Pairing) string {
	if p.Name != "" {
		return p.Name
	}
	return p.Bundle.Source + "→" + p.Leaf.Source
}

func later(x, y time.Time) time.Time {
	if x.After(y) {
		return x
	}
	return y
}
