package audit

import (
	"testing"
	"time"

	"github.com/certdrift/certdrift/config"
)

// TestExpiringDefaults: the default policy stays quiet on certificates a healthy renewer is
// about to renew on schedule (cert-manager at a third of the lifetime left; certgen's year) and
// still warns, then pages, when a renewal is overdue. The control case turns the lifetime
// condition off and shows the old 30-day threshold firing on a healthy 90-day certificate.
func TestExpiringDefaults(t *testing.T) {
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	// cert is a certificate of the given lifetime with left remaining at now.
	cert := func(life, left time.Duration) validity {
		return validity{notBefore: now.Add(left - life), notAfter: now.Add(left)}
	}
	off := config.DefaultPolicy
	off.ExpiringWarningLifetimePercent, off.ExpiringCriticalLifetimePercent = 100, 100
	tests := map[string]struct {
		reason string
		v      validity
		policy config.Policy
		want   Severity
	}{
		"CertManager90dJustBeforeRenewal": {reason: "cert-manager renews at 30 days left: 31 days left is healthy", v: cert(90*day, 31*day), want: 0},
		"CertManager90dRenewalDue":        {reason: "29 days left: renewal due, not yet overdue", v: cert(90*day, 29*day), want: 0},
		"CertManager90dOverdue":           {reason: "14 days left: renewal overdue by half its window", v: cert(90*day, 14*day), want: Warning},
		"CertManager90dLate":              {reason: "6 days left: within the absolute 7 days and 8% of the lifetime", v: cert(90*day, 6*day), want: Critical},
		"Istio24hMidLife":                 {reason: "Istio rotates workload certificates at half their life: 12h left is healthy", v: cert(day, 12*time.Hour), want: 0},
		"Istio24hOverdue":                 {reason: "3h of 24h left: overdue", v: cert(day, 3*time.Hour), want: Warning},
		"Istio24hLate":                    {reason: "1h of 24h left", v: cert(day, time.Hour), want: Critical},
		"Certgen1yTwoMonths":              {reason: "a 1-year certgen certificate with 60 days left: not yet", v: cert(365*day, 60*day), want: 0},
		"Certgen1yMonth":                  {reason: "29 days left: the absolute 30 days applies first", v: cert(365*day, 29*day), want: Warning},
		"Certgen1yWeek":                   {reason: "6 days left", v: cert(365*day, 6*day), want: Critical},
		"UnknownLifetime":                 {reason: "no not_before (a view that lacks it): the absolute thresholds alone", v: validity{notAfter: now.Add(20 * day)}, want: Warning},
		"LifetimeConditionOff":            {reason: "control: percent 100 is the old rule, which warns on a healthy 90-day certificate", v: cert(90*day, 29*day), policy: off, want: Warning},
		"CenturyLifetime":                 {reason: "a 100-year root does not overflow the arithmetic", v: cert(100*365*day, 6*day), want: Critical},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := tc.policy
			if p == (config.Policy{}) {
				p = config.DefaultPolicy
			}
			a := &auditor{now: now, policy: p}
			if got := a.expiring(tc.v); got != tc.want {
				t.Errorf("%s: expiring = %v, want %v", tc.reason, got, tc.want)
			}
		})
	}
}
