package audit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/kube"
)

// CertificateStatus is one cert-manager Certificate joined to what certdrift sees: its Secret
// (spec.secretName, the desired view) and the Envoys bound to that Secret. Revisions are
// cert-manager's status.revision numbering; a view's revision is the revision of the
// CertificateRequest whose issued leaf it holds (cert-manager.io/certificate-revision), 0 when no
// request in cert-manager's history issued it.
type CertificateStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Source is the Secret as a desired source ("namespace/secret").
	Source string `json:"source"`
	// Revision, Ready, RenewalTime and NotAfter are the Certificate's status.
	Revision    int       `json:"revision"`
	Ready       string    `json:"ready"` // the Ready condition's status: True, False, Unknown, or ""
	RenewalTime time.Time `json:"renewal_time,omitzero"`
	NotAfter    time.Time `json:"not_after,omitzero"`
	// SecretRevision is the revision of the leaf the Secret holds (0: unknown, or no Secret).
	SecretRevision int `json:"secret_revision"`
	// Envoys are the bound Envoys' presented leaves, one per Envoy and view.
	Envoys []EnvoyRevision `json:"envoys,omitempty"`
}

// EnvoyRevision is the revision an Envoy presents for a Certificate's Secret.
type EnvoyRevision struct {
	Envoy string `json:"envoy"`
	// View is "served" (a handshake returned it) or "loaded" (the admin holds it; no handshake
	// was judged for the Secret).
	View        string `json:"view"`
	Fingerprint string `json:"fingerprint_sha256"`
	// Revision is 0 when no CertificateRequest in cert-manager's history issued the leaf.
	Revision int `json:"revision"`
}

// checkCertManager joins each Certificate to its Secret and bound Envoys and reports
// CERTIFICATE_NOT_READY, RENEWAL_OVERDUE, CERTIFICATE_SECRET_MISMATCH and STALE_REVISION. It runs
// after the Envoys are judged: it reads the bindings and handshakes they produced.
func (a *auditor) checkCertManager(cm kube.CertManager, envoys []EnvoyView) []CertificateStatus {
	if !cm.Read {
		return nil
	}
	if cm.Err != nil {
		a.add(Finding{Code: Unreachable, Severity: Warning, Subject: Subject{Source: "cert-manager.io"},
			Message:  "cert-manager's Certificates or CertificateRequests could not be listed: its Certificates are not judged: " + cm.Err.Error(),
			Advice:   "grant certdrift get, list and watch on certificates and certificaterequests in cert-manager.io (the chart's rbac.certManager)",
			Evidence: map[string]string{"reason": "list"}})
	}
	if !cm.Present {
		return nil
	}
	// Requests by Certificate: cert-manager keeps revisionHistoryLimit of them (default 1).
	reqs := map[string][]kube.CMRequest{}
	for _, r := range cm.Requests {
		if r.Certificate != "" {
			k := r.Namespace + "/" + r.Certificate
			reqs[k] = append(reqs[k], r)
		}
	}
	// Bound Envoys by source, from the round's bindings (every origin, inferred included).
	bound := map[string][]string{}
	for _, b := range a.bindings {
		if !b.Trust && b.Item == "" && !slices.Contains(bound[b.Source], b.Envoy) {
			bound[b.Source] = append(bound[b.Source], b.Envoy)
		}
	}
	byName := map[string]*EnvoyView{}
	for i := range envoys {
		byName[envoys[i].Config.Name] = &envoys[i]
	}
	var out []CertificateStatus
	for i := range cm.Certificates {
		c := &cm.Certificates[i]
		if c.Err != nil {
			a.add(Finding{Code: ParseError, Severity: Warning, Subject: Subject{Source: c.SecretKey()},
				Message:  fmt.Sprintf("cert-manager Certificate %s could not be read: %v", c.Key(), c.Err),
				Evidence: map[string]string{"certificate": c.Key()}})
			continue
		}
		if c.SecretName == "" {
			continue
		}
		st := a.certificateStatus(c, reqs[c.Key()], bound[c.SecretKey()], byName)
		a.checkCertificate(c, st, reqs[c.Key()])
		out = append(out, st)
	}
	return out
}

// revisionOf finds the revision of the request that issued the leaf with fingerprint fp.
func revisionOf(reqs []kube.CMRequest, fp string) int {
	best := 0
	for _, r := range reqs {
		if fp != "" && r.LeafSHA256 == fp && r.Revision > best {
			best = r.Revision
		}
	}
	return best
}

func (a *auditor) certificateStatus(c *kube.CMCertificate, reqs []kube.CMRequest, envoys []string, byName map[string]*EnvoyView) CertificateStatus {
	st := CertificateStatus{Namespace: c.Namespace, Name: c.Name, Source: c.SecretKey(), Revision: c.Revision,
		Ready: c.Ready.Status, RenewalTime: c.RenewalTime, NotAfter: c.NotAfter}
	if d := a.desired.lookup(st.Source, ""); d != nil && d.hasLeaf() {
		st.SecretRevision = revisionOf(reqs, d.fingerprint())
		// Only when the current revision's request cannot be seen (cert-manager's revision
		// manager keeps it, so: requests not readable) does the status stand in for it. Not
		// otherwise: cert-manager's readiness controller copies status.notAfter from whatever
		// leaf the Secret holds, so a matching notAfter proves nothing about who wrote it.
		if st.SecretRevision == 0 && c.Ready.Status == "True" && sameSecond(d.lf.NotAfter, c.NotAfter) && !hasIssued(reqs, c.Revision) {
			st.SecretRevision = c.Revision
		}
	}
	slices.Sort(envoys)
	for _, name := range envoys {
		ev := byName[name]
		if ev == nil {
			continue
		}
		seen := map[string]bool{}
		for _, l := range a.presentedLeaves(ev, st.Source, "", a.served) {
			view := "served"
			if l.view != "serves" {
				view = "loaded"
			}
			fp := pki.Fingerprint(l.cert)
			if seen[view+fp] {
				continue
			}
			seen[view+fp] = true
			st.Envoys = append(st.Envoys, EnvoyRevision{Envoy: name, View: view, Fingerprint: fp, Revision: revisionOf(reqs, fp)})
		}
	}
	return st
}

// hasIssued reports whether the request of revision rev is known with the leaf it issued.
func hasIssued(reqs []kube.CMRequest, rev int) bool {
	for _, r := range reqs {
		if r.Revision == rev && r.LeafSHA256 != "" {
			return true
		}
	}
	return false
}

func sameSecond(x, y time.Time) bool { return !x.IsZero() && !y.IsZero() && x.Unix() == y.Unix() }

func (a *auditor) checkCertificate(c *kube.CMCertificate, st CertificateStatus, reqs []kube.CMRequest) {
	d := a.desired.lookup(st.Source, "")
	subject := Subject{Source: st.Source}
	evidence := func(kv ...string) map[string]string {
		ev := map[string]string{"certificate": c.Key(), "revision": strconv.Itoa(c.Revision)}
		if c.Ready.Status != "" {
			ev["ready"] = c.Ready.Status
		}
		if c.Ready.Reason != "" {
			ev["ready_reason"] = c.Ready.Reason
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] != "" {
				ev[kv[i]] = kv[i+1]
			}
		}
		return ev
	}
	var servingOld []string
	for _, e := range st.Envoys {
		if !slices.Contains(servingOld, e.Envoy) {
			servingOld = append(servingOld, e.Envoy)
		}
	}
	grace := a.policy.Grace.D()

	// CERTIFICATE_NOT_READY: cert-manager cannot (re)issue, and Envoys keep presenting what
	// they have until it expires.
	// A failed issuance leaves Issuing False with the failed request's reason (Failed, Denied's
	// reason, InvalidCertificate, …) and counts failedIssuanceAttempts; a successful one removes
	// the condition, or (server-side apply) leaves it False with reason Issued.
	failing := c.Issuing.Status == "False" && c.Issuing.Reason != "Issued" || c.FailedIssuanceAttempts > 0
	notReady := c.Ready.Status != "True" && (c.Ready.LastTransitionTime.IsZero() || a.now.Sub(c.Ready.LastTransitionTime) > grace)
	if (failing || notReady) && len(servingOld) > 0 {
		sev := Warning
		if d != nil && d.hasLeaf() && d.lf.NotAfter.Sub(a.now) <= a.policy.ExpiringCritical.D() {
			sev = Critical
		}
		why := "is not Ready"
		if failing {
			why = "failed to issue"
		}
		msg := cmpStr(c.Issuing.Message, c.Ready.Message)
		f := Finding{Code: CertificateNotReady, Severity: sev, Subject: subject,
			Message: fmt.Sprintf("cert-manager Certificate %s %s while %d Envoy(s) still present its current leaf (%s)", c.Key(), why, len(servingOld), strings.Join(servingOld, ", ")),
			Advice:  fmt.Sprintf("fix the issuance (kubectl describe certificate -n %s %s, and its CertificateRequest); Envoys keep the old leaf until it expires", c.Namespace, c.Name),
			Evidence: evidence("issuing_reason", c.Issuing.Reason, "failed_issuance_attempts", itoa0(c.FailedIssuanceAttempts),
				"message", msg, "envoys", strings.Join(servingOld, ","))}
		if !c.LastFailureTime.IsZero() {
			since := c.LastFailureTime
			f.Since = &since
		} else if !c.Ready.LastTransitionTime.IsZero() {
			since := c.Ready.LastTransitionTime
			f.Since = &since
		}
		if d != nil && d.hasLeaf() {
			f.Evidence["leaf_not_after"] = d.lf.NotAfter.UTC().Format(time.RFC3339)
		}
		a.add(f)
	}

	// RENEWAL_OVERDUE: the renewal time passed (beyond the grace period) and the Secret was not
	// written since.
	if !c.RenewalTime.IsZero() && a.now.Sub(c.RenewalTime) > grace && d != nil &&
		(d.changedAt.IsZero() || d.changedAt.Before(c.RenewalTime)) {
		sev := Warning
		if d.hasLeaf() && d.lf.NotAfter.Sub(a.now) <= a.policy.ExpiringCritical.D() {
			sev = Critical
		}
		since := c.RenewalTime
		f := Finding{Code: RenewalOverdue, Severity: sev, Subject: subject, Since: &since,
			Message: fmt.Sprintf("cert-manager Certificate %s was due for renewal at %s (%s ago) and Secret %s has not changed since",
				c.Key(), c.RenewalTime.UTC().Format(time.RFC3339), a.now.Sub(c.RenewalTime).Round(time.Second), st.Source),
			Advice:   "check that cert-manager's controller is running and can reach its issuer (kubectl describe certificate, cert-manager's logs)",
			Evidence: evidence("renewal_time", c.RenewalTime.UTC().Format(time.RFC3339), "secret_changed_at", timeStr(d.changedAt))}
		if d.hasLeaf() {
			f.Evidence["leaf_not_after"] = d.lf.NotAfter.UTC().Format(time.RFC3339)
		}
		a.add(f)
	}

	// CERTIFICATE_SECRET_MISMATCH: cert-manager says Ready, but the Secret holds another leaf
	// than the one its status (and its latest request) describes.
	if c.Ready.Status == "True" && (c.Ready.LastTransitionTime.IsZero() || a.now.Sub(c.Ready.LastTransitionTime) > grace) {
		var problem, secretFP string
		var current *kube.CMRequest
		for i := range reqs {
			if reqs[i].Revision == c.Revision && reqs[i].LeafSHA256 != "" {
				current = &reqs[i]
			}
		}
		switch {
		case d == nil:
			problem = fmt.Sprintf("Secret %s does not exist", st.Source)
		case !d.hasLeaf():
			problem = fmt.Sprintf("Secret %s holds no parseable certificate", st.Source)
		default:
			secretFP = d.fingerprint()
			switch {
			case current != nil && current.LeafSHA256 != secretFP:
				problem = fmt.Sprintf("Secret %s holds another leaf than CertificateRequest %s (revision %d) issued", st.Source, current.Name, c.Revision)
			case !c.NotAfter.IsZero() && !sameSecond(d.lf.NotAfter, c.NotAfter):
				problem = fmt.Sprintf("Secret %s's leaf expires %s, the Certificate's status says %s", st.Source,
					d.lf.NotAfter.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339))
			}
		}
		if problem != "" && (d == nil || d.changedAt.IsZero() || a.now.Sub(d.changedAt) > grace) {
			ev := evidence("secret_sha256", secretFP, "status_not_after", timeStr(c.NotAfter))
			if current != nil {
				ev["request"], ev["request_sha256"] = current.Name, current.LeafSHA256
			}
			if d != nil && d.hasLeaf() {
				ev["secret_not_after"] = d.lf.NotAfter.UTC().Format(time.RFC3339)
			}
			a.add(Finding{Code: CertificateSecretMismatch, Severity: Warning, Subject: subject,
				Message:  fmt.Sprintf("cert-manager Certificate %s is Ready, but %s", c.Key(), problem),
				Advice:   "something other than cert-manager wrote the Secret, or cert-manager's status is stale: find the writer (the Secret's managedFields) and let cert-manager reissue (cmctl renew)",
				Evidence: ev})
		}
	}

	// STALE_REVISION: an Envoy presents an older revision than the Secret holds, beyond the
	// grace period after the Secret changed.
	if st.SecretRevision > 0 && d != nil {
		if stale, age := a.stale(d); stale {
			for _, e := range st.Envoys {
				if e.Revision >= st.SecretRevision || e.Fingerprint == d.fingerprint() {
					continue
				}
				rev := "an older revision (not in cert-manager's request history)"
				if e.Revision > 0 {
					rev = "revision " + strconv.Itoa(e.Revision)
				}
				since := d.changedAt
				f := Finding{Code: StaleRevision, Severity: Warning, Subject: Subject{Envoy: e.Envoy, Source: st.Source},
					Message: fmt.Sprintf("Envoy %s %s %s of cert-manager Certificate %s; Secret %s holds revision %d (changed %s ago)",
						e.Envoy, map[string]string{"served": "serves", "loaded": "has loaded"}[e.View], rev, c.Key(), st.Source, st.SecretRevision, age.Round(time.Second)),
					Advice: "reload or restart the Envoy (certdrift audit --reload); see the STALE_LOADED/STALE_SERVED findings for the same binding",
					Evidence: evidence("view", e.View, "envoy_revision", strconv.Itoa(e.Revision), "secret_revision", strconv.Itoa(st.SecretRevision),
						"envoy_sha256", e.Fingerprint, "secret_sha256", d.fingerprint())}
				if !since.IsZero() {
					f.Since = &since
				}
				a.add(f)
			}
		}
	}
}

func cmpStr(xs ...string) string {
	for _, x := range xs {
		if x != "" {
			return x
		}
	}
	return ""
}

func itoa0(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

func timeStr(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
