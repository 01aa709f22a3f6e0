package audit

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/tlsprobe"
)

// checkUnbound reports each certificate an Envoy holds or serves that no binding ties to a
// desired source (UNBOUND). Without a desired certificate to compare with, certdrift cannot
// say whether it is current, so a report that stayed quiet about it would be a silent "clean":
// an Envoy reading a Secret outside the inventory's namespaces or filters, a CSI volume, a file
// the configuration does not list. The finding is a gap in coverage.
//
// Looked at: the leaf of each active config_dump secret, each /certs context read from a file
// (SDS-delivered contexts are the config_dump secrets under another name, and certificates
// inlined in a static bootstrap have no source to drift from) and each handshake's leaf. Left
// out: leaves any binding of this Envoy accounts for, and mesh workload identities (a leaf whose
// only names are spiffe:// URIs, as Istio's "default" secret): their agent rotates them from the
// mesh CA, not from a Secret.
//
// It is the last reader of h: it adds to h.keys what the located leaves leave out (a binding's
// leaves found by names, or located for a handshake, and its desired leaf).
func (a *auditor) checkUnbound(ev *EnvoyView, bs []*Binding, h *holdings, loaded map[*Binding][]loadedCert, unboundServed []tlsprobe.Result) {
	accounted := h.keys
	for _, b := range bs {
		if len(h.located[b]) == 0 {
			for _, l := range loaded[b] {
				accounted[l.v.key()] = true
			}
		}
		if d := a.desired.lookup(b.Source, b.Item); d != nil && d.hasLeaf() {
			accounted[validity{serial: d.lf.Serial, notAfter: d.lf.NotAfter}.key()] = true
		}
	}
	type unbound struct {
		v         validity
		names     string   // certName: one name
		where     []string // "config_dump secret NAME", "file PATH", "served at ADDR (SNI …)"
		secret    string
		file      string
		endpoint  string
		sni       string
		fp        string
		readsFrom string // a desired source the Envoy names (mount, SDS name) that certdrift does not hold
	}
	var order []string
	found := map[string]*unbound{}
	sc := scopeOf(ev)
	note := func(v validity, dns, uris []string, fp, where string, fill func(u *unbound)) {
		k := v.key()
		if accounted[k] || meshIdentity(dns, uris) || a.isDesiredLeaf(k, sc) {
			return
		}
		u := found[k]
		if u == nil {
			// One name, as every message names a certificate (certName): the rest of a hostile
			// admin's SANs may carry anything (test/hostile TestNoForeignKeyBytes).
			u = &unbound{v: v, names: certName(dns, uris, "", v.serial), fp: fp}
			found[k] = u
			order = append(order, k)
		}
		if !slices.Contains(u.where, where) {
			u.where = append(u.where, where)
		}
		u.fp = cmp.Or(u.fp, fp)
		fill(u)
	}
	if snap := ev.Admin; snap != nil {
		for _, s := range snap.Secrets {
			if !s.HasCertificate || s.State == envoystate.SecretWarming || len(s.Chain) == 0 || s.Chain[0] == nil {
				continue
			}
			leaf := s.Chain[0]
			note(validityOf(leaf), leaf.DNSNames, uriStrings(leaf), pki.Fingerprint(leaf), fmt.Sprintf("config_dump secret %q", s.Name), func(u *unbound) {
				u.secret = cmp.Or(u.secret, s.Name)
				u.file = cmp.Or(u.file, s.CertFile)
			})
		}
		for _, c := range snap.Contexts {
			if len(c.Chain) == 0 || !isFilePath(c.Chain[0].Path) {
				continue
			}
			cd := c.Chain[0]
			note(validityOfDetail(cd), cd.DNSNames, cd.URIs, "", "file "+cd.Path, func(u *unbound) { u.file = cmp.Or(u.file, cd.Path) })
		}
	}
	for _, r := range unboundServed {
		leaf := r.Chain[0]
		where := "served at " + r.Target.Address
		if r.Target.SNI != "" {
			where += fmt.Sprintf(" (SNI %q)", r.Target.SNI)
		}
		note(validityOf(leaf), leaf.DNSNames, uriStrings(leaf), pki.Fingerprint(leaf), where, func(u *unbound) {
			u.endpoint, u.sni = cmp.Or(u.endpoint, r.Target.Address), cmp.Or(u.sni, r.Target.SNI)
		})
	}
	// A binding the pod's mounts or an SDS name derived for a source certdrift does not hold (a
	// Secret outside --namespace, filtered out, or not readable as a certificate) says where
	// the certificate comes from.
	for _, k := range order {
		u := found[k]
		for _, cb := range ev.Config.Bindings {
			if a.desired.lookup(cb.Source, cb.Item) != nil {
				continue
			}
			if (cb.Secret != "" && cb.Secret == u.secret) || (isFilePath(cb.File) && u.file != "" && filepath.Clean(cb.File) == filepath.Clean(u.file)) {
				u.readsFrom = refName(cb.Source, cb.Item)
			}
		}
	}
	for _, k := range order {
		u := found[k]
		s := Subject{Envoy: ev.Config.Name, Secret: u.secret, File: u.file, Endpoint: u.endpoint, SNI: u.sni}
		ev := map[string]string{"serial": pki.SerialHex(u.v.serial), "not_after": u.v.notAfter.UTC().Format(time.RFC3339), "name": u.names,
			"seen_in": strings.Join(u.where, "; ")}
		if u.fp != "" {
			ev["fingerprint_sha256"] = u.fp
		}
		msg := fmt.Sprintf("Envoy %s holds %s (%s) that no desired source holds: certdrift cannot tell whether it is the certificate it should be",
			s.Envoy, quote(cmp.Or(u.v.subject, u.names)), strings.Join(u.where, "; "))
		advice := "add the source that holds it to the desired view (local mode: a desired entry for its file or directory; Kubernetes: check --namespace, --exclude-namespace, --secret-selector and --secret-type), or bind it explicitly"
		if u.readsFrom != "" {
			ev["reads_from"] = u.readsFrom
			msg += fmt.Sprintf("; it comes from %s, which certdrift does not read", u.readsFrom)
			advice = fmt.Sprintf("make %s part of the desired view (a namespace or filter leaves it out, or it holds no readable certificate), or bind this Envoy to the source that holds the certificate", u.readsFrom)
		}
		a.add(Finding{Code: Unbound, Severity: Warning, Subject: s, Evidence: ev, Message: msg, Advice: advice})
	}
}

// isDesiredLeaf reports whether the certificate with validity key k is the current leaf of a
// desired source the Envoy may hold (scope): no binding names which one (two sources covering one
// SNI, an admin that did not answer), but it is a certificate certdrift knows to be current, not
// one without a source. The index is built once per Run, on first use.
func (a *auditor) isDesiredLeaf(k string, sc scope) bool {
	if a.leafKeys == nil {
		a.leafKeys = map[string][]*desiredCert{}
		for _, d := range a.desired.all {
			if d.hasLeaf() {
				lk := validity{serial: d.lf.Serial, notAfter: d.lf.NotAfter}.key()
				a.leafKeys[lk] = append(a.leafKeys[lk], d)
			}
		}
	}
	return slices.ContainsFunc(a.leafKeys[k], sc.allows)
}

// meshIdentity reports a leaf named only by spiffe:// URIs: a mesh workload identity that its
// agent rotates from the mesh CA (Istio's "default" SDS secret), which no Secret holds.
func meshIdentity(dns, uris []string) bool {
	if len(dns) > 0 || len(uris) == 0 {
		return false
	}
	for _, u := range uris {
		if !strings.HasPrefix(u, "spiffe://") {
			return false
		}
	}
	return true
}
