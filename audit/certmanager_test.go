package audit

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/test/certs"
)

// TestCertManagerChecks judges cert-manager Certificates joined to their Secret and the Envoys
// bound to it: each finding with a control case that differs in the one fact the check reads.
func TestCertManagerChecks(t *testing.T) {
	f := newFixture(t)
	rotated := now.Add(-10 * time.Minute) // beyond the 2m default grace
	justNow := now.Add(-20 * time.Second) // inside it
	started := now.Add(-time.Hour)
	web := []config.Binding{{Source: "shop/web", File: "/certs/tls.crt"}}
	fp := func(l *certs.Leaf) string { return pki.Fingerprint(l.Cert) }
	ready := func(status string, since time.Time) kube.CMCondition {
		return kube.CMCondition{Status: status, Reason: map[string]string{"True": "Ready", "False": "Failed"}[status], LastTransitionTime: since}
	}
	cert := func(rev int, cond kube.CMCondition, notAfter time.Time, mod ...func(*kube.CMCertificate)) kube.CMCertificate {
		c := kube.CMCertificate{Namespace: "shop", Name: "web-cert", SecretName: "web", Revision: rev, Ready: cond,
			NotAfter: notAfter, RenewalTime: notAfter.Add(-30 * 24 * time.Hour)}
		for _, m := range mod {
			m(&c)
		}
		return c
	}
	req := func(rev int, l *certs.Leaf) kube.CMRequest {
		return kube.CMRequest{Namespace: "shop", Name: "web-cert-" + string(rune('0'+rev)), Certificate: "web-cert", Revision: rev,
			Ready: kube.CMCondition{Status: "True"}, LeafSHA256: fp(l), LeafNotAfter: l.Cert.NotAfter}
	}
	cm := func(c kube.CMCertificate, reqs ...kube.CMRequest) kube.CertManager {
		return kube.CertManager{Read: true, Present: true, Certificates: []kube.CMCertificate{c}, Requests: reqs}
	}
	servingCur := pod("shop", "web-a", "Deployment/web", started, nil, web, served("10.0.0.1:8443", "www.example.com", f.cur.Cert))
	servingOld := pod("shop", "web-a", "Deployment/web", started, nil, web, served("10.0.0.1:8443", "www.example.com", f.old.Cert))
	secret := func(l *certs.Leaf, at time.Time) []desired.Observation {
		return []desired.Observation{kubeDesired("shop/web", l, at)}
	}
	curNotAfter := f.cur.Cert.NotAfter
	// A leaf for the same names that no CertificateRequest issued (written into the Secret by hand).
	hand := f.ca.Leaf(t, certs.WithCommonName("www by hand"), certs.WithDNSNames("www.example.com"), certs.WithFreshKey(),
		certs.WithValidity(now.Add(-time.Hour), now.Add(60*24*time.Hour)))

	cases := map[string]struct {
		reason   string
		in       Inputs
		want     got
		statuses []CertificateStatus
	}{
		"Converged": {
			reason: "cert-manager Ready at revision 2, the Secret and the Envoy hold revision 2's leaf",
			in: Inputs{Desired: secret(f.cur, rotated), Envoys: []EnvoyView{servingCur},
				CertManager: cm(cert(2, ready("True", rotated), curNotAfter), req(1, f.old), req(2, f.cur))},
			want: got{States: []string{"shop/web=converged"}},
			statuses: []CertificateStatus{{Namespace: "shop", Name: "web-cert", Source: "shop/web", Revision: 2, Ready: "True",
				RenewalTime: curNotAfter.Add(-30 * 24 * time.Hour), NotAfter: curNotAfter, SecretRevision: 2,
				Envoys: []EnvoyRevision{{Envoy: "shop/web-a", View: "served", Fingerprint: fp(f.cur), Revision: 2}}}},
		},
		"EnvoyServesPreviousRevision": {
			reason: "cert-manager renewed (revision 2) and the Secret was updated 10m ago; the Envoy still serves revision 1",
			in: Inputs{Desired: secret(f.cur, rotated), Envoys: []EnvoyView{servingOld},
				CertManager: cm(cert(2, ready("True", rotated), curNotAfter), req(1, f.old), req(2, f.cur))},
			want: got{Codes: []string{"STALE_REVISION warning", "STALE_SERVED warning"}, States: []string{"shop/web=stale"}},
			statuses: []CertificateStatus{{Namespace: "shop", Name: "web-cert", Source: "shop/web", Revision: 2, Ready: "True",
				RenewalTime: curNotAfter.Add(-30 * 24 * time.Hour), NotAfter: curNotAfter, SecretRevision: 2,
				Envoys: []EnvoyRevision{{Envoy: "shop/web-a", View: "served", Fingerprint: fp(f.old), Revision: 1}}}},
		},
		"EnvoyServesPreviousRevisionWithinGrace": {
			reason: "the same, 20s after the Secret changed: a rotation in progress",
			in: Inputs{Desired: secret(f.cur, justNow), Envoys: []EnvoyView{servingOld},
				CertManager: cm(cert(2, ready("True", rotated), curNotAfter), req(1, f.old), req(2, f.cur))},
			want: got{States: []string{"shop/web=converging"}},
		},
		"EnvoyServesRevisionOutOfHistory": {
			reason: "revisionHistoryLimit 1: only revision 2's request is left; the old leaf is still an older revision, and the Secret's revision comes from the status",
			in: Inputs{Desired: secret(f.cur, rotated), Envoys: []EnvoyView{servingOld},
				CertManager: cm(cert(2, ready("True", rotated), curNotAfter))},
			want: got{Codes: []string{"STALE_REVISION warning", "STALE_SERVED warning"}, States: []string{"shop/web=stale"}},
		},
		"NotReadyWhileEnvoysServe": {
			reason: "issuance failed 10m ago; the Envoy still serves the current (old) leaf",
			in: Inputs{Desired: secret(f.cur, started), Envoys: []EnvoyView{servingCur},
				CertManager: cm(cert(2, ready("False", rotated), curNotAfter), req(2, f.cur))},
			want: got{Codes: []string{"CERTIFICATE_NOT_READY warning"}, States: []string{"shop/web=converged"}},
		},
		"NotReadyWithinGrace": {
			reason: "Ready went False 20s ago: not yet reported",
			in: Inputs{Desired: secret(f.cur, started), Envoys: []EnvoyView{servingCur},
				CertManager: cm(cert(2, ready("False", justNow), curNotAfter), req(2, f.cur))},
			want: got{States: []string{"shop/web=converged"}},
		},
		"NotReadyNoEnvoy": {
			reason: "no Envoy is bound to the Secret: cert-manager's own problem, not certdrift's",
			in: Inputs{Desired: secret(f.cur, started),
				CertManager: cm(cert(2, ready("False", rotated), curNotAfter), req(2, f.cur))},
		},
		"ReadyButRenewalFailing": {
			reason: "the old certificate is still valid (Ready True) but renewal attempts fail",
			in: Inputs{Desired: secret(f.cur, started), Envoys: []EnvoyView{servingCur},
				CertManager: cm(cert(2, ready("True", started), curNotAfter, func(c *kube.CMCertificate) {
					c.FailedIssuanceAttempts, c.LastFailureTime = 3, rotated
					c.Issuing = kube.CMCondition{Status: "False", Reason: "Failed", Message: "the CA Secret is missing"}
				}), req(2, f.cur))},
			want: got{Codes: []string{"CERTIFICATE_NOT_READY warning"}, States: []string{"shop/web=converged"}},
		},
		"IssuedUnderServerSideApply": {
			reason: "control: with server-side apply cert-manager leaves Issuing False with reason Issued after a success",
			in: Inputs{Desired: secret(f.cur, started), Envoys: []EnvoyView{servingCur},
				CertManager: cm(cert(2, ready("True", started), curNotAfter, func(c *kube.CMCertificate) {
					c.Issuing = kube.CMCondition{Status: "False", Reason: "Issued", Message: "The certificate has been successfully issued"}
				}), req(2, f.cur))},
			want: got{States: []string{"shop/web=converged"}},
		},
		"IssuanceDenied": {
			reason: "a denied request: Issuing False with the denial's reason, before failedIssuanceAttempts is counted",
			in: Inputs{Desired: secret(f.cur, started), Envoys: []EnvoyView{servingCur},
				CertManager: cm(cert(2, ready("True", started), curNotAfter, func(c *kube.CMCertificate) {
					c.Issuing = kube.CMCondition{Status: "False", Reason: "policy-denied", Message: "The CertificateRequest was denied by an approval controller"}
				}), req(2, f.cur))},
			want: got{Codes: []string{"CERTIFICATE_NOT_READY warning"}, States: []string{"shop/web=converged"}},
		},
		"RenewalOverdue": {
			reason: "renewal was due an hour ago and the Secret last changed before that",
			in: Inputs{Desired: secret(f.cur, now.Add(-50*24*time.Hour)),
				CertManager: cm(cert(2, ready("True", started), curNotAfter, func(c *kube.CMCertificate) { c.RenewalTime = now.Add(-time.Hour) }), req(2, f.cur))},
			want: got{Codes: []string{"RENEWAL_OVERDUE warning"}},
		},
		"RenewalDone": {
			reason: "control: the Secret changed after the renewal time",
			in: Inputs{Desired: secret(f.cur, now.Add(-30*time.Minute)),
				CertManager: cm(cert(2, ready("True", started), curNotAfter, func(c *kube.CMCertificate) { c.RenewalTime = now.Add(-time.Hour) }), req(2, f.cur))},
		},
		"SecretNotWhatStatusSays": {
			reason: "Ready at revision 2, whose request issued cur, but the Secret holds another leaf (written by hand)",
			in: Inputs{Desired: secret(f.other, rotated),
				CertManager: cm(cert(2, ready("True", started), curNotAfter), req(2, f.cur))},
			want: got{Codes: []string{"CERTIFICATE_SECRET_MISMATCH warning"}},
		},
		"HandWrittenLeafIsNoRevision": {
			reason: "the Secret holds a leaf no request issued, with the expiry cert-manager's status copied from it: a mismatch, and not revision 2, so no STALE_REVISION for the Envoy serving revision 1",
			in: Inputs{Desired: secret(hand, rotated), Envoys: []EnvoyView{servingOld},
				CertManager: cm(cert(2, ready("True", started), hand.Cert.NotAfter), req(1, f.old), req(2, f.cur))},
			want: got{Codes: []string{"CERTIFICATE_SECRET_MISMATCH warning", "STALE_SERVED warning"}, States: []string{"shop/web=stale"}},
		},
		"SecretNotAfterDiffers": {
			reason: "no request left to compare with; the status' notAfter is not the Secret leaf's",
			in: Inputs{Desired: secret(f.old, rotated),
				CertManager: cm(cert(2, ready("True", started), curNotAfter))},
			want: got{Codes: []string{"CERTIFICATE_SECRET_MISMATCH warning"}},
		},
		"SecretMissing": {
			reason: "cert-manager says Ready but the Secret does not exist",
			in:     Inputs{CertManager: cm(cert(2, ready("True", started), curNotAfter), req(2, f.cur))},
			want:   got{Codes: []string{"CERTIFICATE_SECRET_MISMATCH warning"}},
		},
		"CertManagerAbsent": {
			reason: "the CRDs are not served: nothing to judge, and not an error",
			in:     Inputs{Desired: secret(f.cur, rotated), Envoys: []EnvoyView{servingOld}, CertManager: kube.CertManager{Read: true}},
			want:   got{Codes: []string{"STALE_SERVED warning"}, States: []string{"shop/web=stale"}},
		},
		"CertManagerUnreadable": {
			reason: "the CRDs are served but listing was forbidden: a gap, said so",
			in: Inputs{Desired: secret(f.cur, rotated), Envoys: []EnvoyView{servingCur},
				CertManager: kube.CertManager{Read: true, Present: true, Err: errors.New("forbidden")}},
			want: got{Codes: []string{"UNREACHABLE warning"}, States: []string{"shop/web=converged"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := Run(tc.in, config.DefaultPolicy, now)
			checkLazyAlike(t, tc.in, config.DefaultPolicy, now, r)
			if diff := cmp.Diff(tc.want, summarize(r)); diff != "" {
				t.Errorf("%s\n(-want +got):\n%s", tc.reason, diff)
				for _, f := range r.Findings {
					t.Logf("%s %s: %s %v", f.Code, f.Severity, f.Message, f.Evidence)
				}
			}
			if tc.statuses != nil {
				if diff := cmp.Diff(tc.statuses, r.CertManager); diff != "" {
					t.Errorf("%s: cert-manager statuses (-want +got):\n%s", tc.reason, diff)
				}
			}
		})
	}
}

// TestCertManagerFindingsCarryNoSecrets: the findings about a Certificate name objects and
// fingerprints, never PEM.
func TestCertManagerFindingsCarryNoSecrets(t *testing.T) {
	f := newFixture(t)
	in := Inputs{Desired: []desired.Observation{kubeDesired("shop/web", f.other, now.Add(-time.Hour))},
		CertManager: kube.CertManager{Read: true, Present: true, Certificates: []kube.CMCertificate{{Namespace: "shop", Name: "c",
			SecretName: "web", Revision: 1, Ready: kube.CMCondition{Status: "True"}, NotAfter: f.old.Cert.NotAfter}}}}
	r := Run(in, config.DefaultPolicy, now)
	if len(r.Findings) != 1 || r.Findings[0].Code != CertificateSecretMismatch {
		t.Fatalf("findings = %+v, want one CERTIFICATE_SECRET_MISMATCH", r.Findings)
	}
	for k, v := range r.Findings[0].Evidence {
		if len(v) > 200 {
			t.Errorf("evidence %s is %d bytes: %.60q…", k, len(v), v)
		}
	}
}
