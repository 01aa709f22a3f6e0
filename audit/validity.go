package audit

import (
	"crypto/x509"
	"fmt"
	"math/big"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
)

// validity is what the expiry checks need of a certificate; /certs gives no more than this.
type validity struct {
	serial              *big.Int
	subject             string
	notBefore, notAfter time.Time
	fingerprint         string // empty when only /certs saw it
}

func validityOf(c *x509.Certificate) validity {
	return validity{serial: c.SerialNumber, subject: certNameOf(c), notBefore: c.NotBefore, notAfter: c.NotAfter, fingerprint: pki.Fingerprint(c)}
}

// certName is how every message names a certificate, whichever view it was seen in: its first
// DNS name, else its first URI (a SPIFFE ID), else its subject's common name, else its serial.
// Envoy's /certs shows the SANs and no subject, so a name taken from the subject would call one
// certificate "CN=…" when read from a file and something else when read from /certs.
func certName(dns, uris []string, cn string, serial *big.Int) string {
	switch {
	case len(dns) > 0:
		return dns[0]
	case len(uris) > 0:
		return uris[0]
	case cn != "":
		return cn
	}
	return "serial " + pki.SerialHex(serial)
}

func certNameOf(c *x509.Certificate) string {
	return certName(c.DNSNames, uriStrings(c), c.Subject.CommonName, c.SerialNumber)
}

// key identifies a certificate across views that may lack a fingerprint: /certs gives only the
// serial and the validity window, which together are unique in practice.
func (v validity) key() string {
	return pki.SerialHex(v.serial) + "|" + v.notAfter.UTC().Format(time.RFC3339)
}

// checkValidity reports EXPIRED, EXPIRING and NOT_YET_VALID for each certificate of a chain seen
// in view. CA certificates in trust bundles are judged by bundle hygiene instead.
func (a *auditor) checkValidity(view string, s Subject, chain []*x509.Certificate, served bool) {
	for i, c := range chain {
		if c == nil {
			continue
		}
		what := "certificate"
		if i > 0 {
			what = fmt.Sprintf("chain certificate #%d", i)
		}
		a.checkValidityOf(view, s, validityOf(c), what, served)
	}
}

// checkValidityFacts is checkValidity for certificates kept unparsed: the same findings from
// the facts the inventory kept (the same serial, names, times and fingerprint).
func (a *auditor) checkValidityFacts(view string, s Subject, chain []desired.Cert) {
	for i, c := range chain {
		// Most certificates are well inside their validity: that is decided from the two times
		// alone, before the name and fingerprint a finding would need are made (at 10,000
		// Secrets, every round).
		if c.Facts == nil || a.validityVerdict(validity{notBefore: c.Facts.NotBefore, notAfter: c.Facts.NotAfter}) == "" {
			continue
		}
		what := "certificate"
		if i > 0 {
			what = fmt.Sprintf("chain certificate #%d", i)
		}
		a.checkValidityOf(view, s, validityOfFacts(c), what, false)
	}
}

func validityOfFacts(c desired.Cert) validity {
	f := c.Facts
	return validity{serial: f.Serial, subject: certName(f.DNSNames, f.URIs, f.CommonName, f.Serial),
		notBefore: f.NotBefore, notAfter: f.NotAfter, fingerprint: c.Fingerprint()}
}

// checkValidityOf judges one certificate; what names it in the message ("certificate", "chain
// certificate #1", "CA certificate").
func (a *auditor) checkValidityOf(view string, s Subject, v validity, what string, served bool) {
	verdict := a.validityVerdict(v)
	if verdict == "" {
		return // nothing to report: no key or evidence needed
	}
	k := v.key()
	if a.seenValidity[k] {
		return
	}
	a.seenValidity[k] = true
	ev := map[string]string{
		"view":       view,
		"serial":     pki.SerialHex(v.serial),
		"not_before": v.notBefore.UTC().Format(time.RFC3339),
		"not_after":  v.notAfter.UTC().Format(time.RFC3339),
	}
	if v.fingerprint != "" {
		ev["fingerprint_sha256"] = v.fingerprint
	}
	left := v.notAfter.Sub(a.now)
	switch verdict {
	case Expired:
		a.add(Finding{Code: Expired, Severity: Critical, Subject: s, Evidence: ev,
			Message: fmt.Sprintf("%s %s %s expired %s ago", view, what, quote(v.subject), roundDur(-left)),
			Advice:  "issue a new certificate and make sure every Envoy loads it"})
	case NotYetValid:
		sev := Warning
		if served {
			sev = Critical // clients are rejecting it right now
		}
		a.add(Finding{Code: NotYetValid, Severity: sev, Subject: s, Evidence: ev,
			Message: fmt.Sprintf("%s %s %s is not valid for another %s", view, what, quote(v.subject), roundDur(v.notBefore.Sub(a.now))),
			Advice:  "check the issuer's clock or backdating; clients reject it until then"})
	case Expiring:
		sev := a.expiring(v)
		a.add(Finding{Code: Expiring, Severity: sev, Subject: s, Evidence: ev,
			Message: fmt.Sprintf("%s %s %s expires in %s", view, what, quote(v.subject), roundDur(left)),
			Advice:  "renew it; if it was already renewed, look for STALE findings on the Envoys that still hold this one"})
	}
}

// validityVerdict is the finding a certificate's validity window calls for at a.now: Expired,
// NotYetValid, Expiring, or "" when it is comfortably valid.
func (a *auditor) validityVerdict(v validity) Code {
	switch {
	case !v.notAfter.IsZero() && v.notAfter.Sub(a.now) <= 0:
		return Expired
	case !v.notBefore.IsZero() && v.notBefore.After(a.now):
		return NotYetValid
	case a.expiring(v) != 0:
		return Expiring
	}
	return ""
}

// expiring is the severity of EXPIRING for a certificate still valid, 0 when it is not expiring:
// within the policy's time left AND within its share of the lifetime (config.Policy says why).
// A percent of 0 or 100, or an unknown lifetime, leaves only the time left.
func (a *auditor) expiring(v validity) Severity {
	if v.notAfter.IsZero() {
		return 0
	}
	left := v.notAfter.Sub(a.now)
	within := func(d time.Duration, percent int) bool {
		if left > d {
			return false
		}
		life := v.notAfter.Sub(v.notBefore)
		if percent <= 0 || percent >= 100 || v.notBefore.IsZero() || life <= 0 {
			return true
		}
		// In float: a century's lifetime in nanoseconds times 100 overflows int64.
		return float64(left) <= float64(life)*float64(percent)/100
	}
	switch {
	case within(a.policy.ExpiringCritical.D(), a.policy.ExpiringCriticalLifetimePercent):
		return Critical
	case within(a.policy.ExpiringWarning.D(), a.policy.ExpiringWarningLifetimePercent):
		return Warning
	}
	return 0
}

func (a *auditor) checkWeak(view string, s Subject, c *x509.Certificate) {
	for _, w := range pki.WeakCrypto(c, a.policy.MinRSABits) {
		a.add(Finding{Code: WeakCrypto, Severity: Warning, Subject: s,
			Message:  fmt.Sprintf("%s certificate %s: %s", view, quote(certNameOf(c)), w),
			Advice:   "re-issue with RSA ≥ 2048 or ECDSA P-256 and a SHA-256 signature",
			Evidence: map[string]string{"fingerprint_sha256": pki.Fingerprint(c), "view": view}})
	}
}

func quote(s string) string {
	if s == "" {
		return `""`
	}
	return fmt.Sprintf("%q", s)
}

// roundDur prints durations the way a person reads them: days past a day, else minutes.
func roundDur(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	case d >= time.Hour:
		return d.Round(time.Minute).String()
	default:
		return d.Round(time.Second).String()
	}
}
