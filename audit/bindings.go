package audit

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
)

// Binding origins, in order of trust.
const (
	OriginConfig   = "config"
	OriginPath     = "path"
	OriginSDSName  = "sds-name"
	OriginInferred = "inferred"
)

// envoyBindings derives the bindings of one Envoy, most trusted first: its config bindings in
// the order given (explicit ones, and in Kubernetes mode those package bind derived from the
// pod), then the certificate paths Envoy reports (/certs, config_dump) matched to desired files,
// then SDS secret names equal to a desired source name, then a heuristic match on the SAN set.
// The precedence of every binding rule is documented once, in package bind.
//
// It also records in h what the Envoy's admin shows it holding for each binding, located once
// here: the inference needs it, and so do the loaded view's judgement and UNBOUND.
func (a *auditor) envoyBindings(ev *EnvoyView, h *holdings) []*Binding {
	var bs []*Binding
	// byRef keeps lookups linear in fleet size: an Envoy may hold hundreds of certificates.
	byRef := map[[2]string]*Binding{}
	have := func(source, item string) bool { return byRef[[2]string{source, item}] != nil }
	// add keeps one binding per desired certificate: a later, less trusted rule only fills in
	// where the Envoy holds it (secret, file) when an earlier rule named the pair without saying.
	add := func(nb *Binding) {
		if b := byRef[[2]string{nb.Source, nb.Item}]; b != nil {
			b.Secret = cmp.Or(b.Secret, nb.Secret)
			b.File = cmp.Or(b.File, nb.File)
			return
		}
		byRef[[2]string{nb.Source, nb.Item}] = nb
		bs = append(bs, nb)
	}
	name := ev.Config.Name
	for _, cb := range ev.Config.Bindings {
		origin := cmp.Or(cb.Origin, OriginConfig)
		d := a.desired.lookup(cb.Source, cb.Item)
		switch {
		case d == nil && origin == OriginConfig:
			// Named explicitly, and not there: a gap, never a silent pass.
			a.reportMissingSource(Subject{Envoy: name, Source: cb.Source, Item: cb.Item, Secret: cb.Secret, File: cb.File},
				fmt.Sprintf("Envoy %s is bound to %s", name, refName(cb.Source, cb.Item)))
		case d == nil:
			// A mount of something that holds no certificate (a config Secret, a Secret the
			// inventory's filters leave out): nothing to judge.
			continue
		case a.trustOnly(ev, cb, d):
			continue // judged as trust (trust.go)
		}
		add(&Binding{Envoy: name, Source: cb.Source, Item: cb.Item, Secret: cb.Secret, File: cb.File, Origin: origin})
	}
	for _, ep := range ev.Config.Endpoints {
		if ep.Source != "" {
			add(&Binding{Envoy: name, Source: ep.Source, Item: ep.Item, Origin: OriginConfig})
		}
	}
	snap := ev.Admin
	if snap == nil {
		h.locate(a, snap, bs)
		return bs
	}
	for _, s := range snap.Secrets {
		if s.CertFile == "" {
			continue
		}
		if d := a.desired.byPath[filepath.Clean(s.CertFile)]; d != nil {
			add(&Binding{Envoy: name, Source: d.source, Item: d.item, Secret: s.Name, File: s.CertFile, Origin: OriginPath})
		}
	}
	// File-based SDS: Envoy 1.40 and 1.36 inline the certificate it read (config_dump shows no
	// filename, /certs says "<inline>"), but keep the watched directory, which is the Secret
	// volume's mount: that ties the SDS secret to a desired directory source.
	for _, s := range snap.Secrets {
		if !s.HasCertificate || s.WatchedDir == "" {
			continue
		}
		for _, d := range a.desired.byDir[filepath.Clean(s.WatchedDir)] {
			add(&Binding{Envoy: name, Source: d.source, Item: d.item, Secret: s.Name, Origin: OriginPath})
		}
	}
	for _, c := range snap.Contexts {
		for _, cd := range c.Chain {
			if d := a.desired.byPath[filepath.Clean(cd.Path)]; d != nil {
				add(&Binding{Envoy: name, Source: d.source, Item: d.item, File: cd.Path, Origin: OriginPath})
			}
		}
	}
	for _, s := range snap.Secrets {
		if !s.HasCertificate {
			continue
		}
		if d := a.desired.lookup(s.Name, ""); d != nil {
			add(&Binding{Envoy: name, Source: d.source, Item: d.item, Secret: s.Name, File: s.CertFile, Origin: OriginSDSName})
		}
	}
	// Inferred: a loaded leaf whose DNS names equal a desired certificate's but whose serial
	// differs is most likely an old copy of it — of a certificate the pod could have mounted.
	// Only for leaves no binding above accounts for: a leaf the Envoy reads from a mounted
	// Secret's file (or an SDS secret bound by name) is that Secret's, current or stale, and not
	// an old copy of every other Secret issued for the same names (two cert-manager
	// Certificates for one host: the pod mounts one, and would be "stale" for the other).
	h.locate(a, snap, bs)
	explicit := len(bs)
	sc := scopeOf(ev)
	for _, c := range snap.Contexts {
		if len(c.Chain) == 0 || len(c.Chain[0].DNSNames) == 0 {
			continue
		}
		cd := c.Chain[0]
		if h.keys[validityOfDetail(cd).key()] {
			continue
		}
		// A loaded leaf that is some desired source's current certificate is not an old copy
		// of another source that merely carries the same names: Envoy Gateway's certgen issues
		// its "envoy" (xDS client) and "envoy-rate-limit" leaves for the same
		// *.envoy-gateway-system names, and every proxy would otherwise be "stale" for the
		// rate limit's Secret.
		current := false
		for _, d := range a.desired.all {
			if d.lf != nil && sc.allows(d) && isLoadedLeaf(d.lf, cd) {
				current = true
			}
		}
		for _, d := range a.desired.all {
			if d.lf == nil || have(d.source, d.item) || !pki.SameNames(d.lf.DNSNames, cd.DNSNames) || !sc.allows(d) {
				continue
			}
			if current && !isLoadedLeaf(d.lf, cd) {
				continue
			}
			add(&Binding{Envoy: name, Source: d.source, Item: d.item, File: cd.Path, Origin: OriginInferred})
		}
	}
	// Located only now: what an inferred binding holds must not decide the inference of the
	// next leaf.
	h.locate(a, snap, bs[explicit:])
	return bs
}

// isLoadedLeaf reports whether the certificate Envoy describes is the leaf with these facts: same
// serial and DNS names (Envoy's /certs gives no fingerprint).
func isLoadedLeaf(leaf *desired.Facts, cd envoystate.CertDetail) bool {
	return cd.Serial != nil && leaf.Serial != nil && leaf.Serial.Cmp(cd.Serial) == 0 &&
		pki.SameNames(leaf.DNSNames, cd.DNSNames)
}

// trustOnly reports whether an explicit binding locates only the source's CA bundle: no
// certificate file, and an SDS name (if any) that the Envoy holds as a validation context only;
// or a desired source that holds a bundle and no certificate (a ConfigMap, a CA-only Secret).
func (a *auditor) trustOnly(ev *EnvoyView, cb config.Binding, d *desiredCert) bool {
	if !d.it.HasChain() && d.it.ChainErr == nil && (d.it.HasCA() || d.it.CAErr != nil) {
		return true
	}
	if cb.File != "" || (cb.Secret == "" && cb.CAFile == "" && cb.Dir == "") {
		return false
	}
	if cb.Secret == "" {
		return cb.CAFile != ""
	}
	if ev.Admin == nil {
		return false
	}
	validation := false
	for _, s := range ev.Admin.Secrets {
		if s.Name == cb.Secret {
			if s.HasCertificate {
				return false
			}
			validation = validation || s.HasValidation
		}
	}
	return validation
}

func refName(source, item string) string {
	if item == "" {
		return source
	}
	return source + "/" + item
}

// bindingForEndpoint finds which binding a TLS endpoint and SNI serve: the endpoint's explicit
// source, else the listener filter chain that matches the port and SNI and names a secret or file
// of a binding, else a binding whose desired leaf covers the SNI.
func (a *auditor) bindingForEndpoint(ev *EnvoyView, bs []*Binding, ep config.Endpoint, sni string) *Binding {
	if ep.Source != "" {
		for _, b := range bs {
			if b.Source == ep.Source && b.Item == ep.Item {
				return b
			}
		}
	}
	if ev.Admin != nil {
		if fc := matchFilterChain(ev.Admin.Listeners, ep.Address, sni); fc != nil {
			for _, b := range bs {
				if (b.Secret != "" && slices.Contains(fc.SDSCertNames, b.Secret)) ||
					(isFilePath(b.File) && slices.ContainsFunc(fc.CertFiles, func(f string) bool { return filepath.Clean(f) == filepath.Clean(b.File) })) {
					return b
				}
			}
			// The chain names a secret or file no binding holds yet: bind by that name.
			for _, n := range fc.SDSCertNames {
				if d := a.desired.lookup(n, ""); d != nil {
					return &Binding{Envoy: ev.Config.Name, Source: d.source, Item: d.item, Secret: n, Origin: OriginSDSName}
				}
			}
			for _, f := range fc.CertFiles {
				if d := a.desired.byPath[filepath.Clean(f)]; d != nil {
					return &Binding{Envoy: ev.Config.Name, Source: d.source, Item: d.item, File: f, Origin: OriginPath}
				}
			}
		}
	}
	if sni != "" {
		var found *Binding
		for _, b := range bs {
			d := a.desired.lookup(b.Source, b.Item)
			if d != nil && d.hasLeaf() && d.host().VerifyHostname(sni) == nil {
				if found != nil {
					return nil // ambiguous: better no binding than a wrong one
				}
				found = b
			}
		}
		if found != nil {
			return found
		}
		// No binding of this Envoy covers the SNI (its admin may be unreachable): a desired
		// certificate that covers it is the likely one, if it is the only one.
		var only *desiredCert
		sc := scopeOf(ev)
		for _, d := range a.desired.all {
			if d.hasLeaf() && sc.allows(d) && d.host().VerifyHostname(sni) == nil {
				if only != nil {
					return nil
				}
				only = d
			}
		}
		if only != nil {
			return &Binding{Envoy: ev.Config.Name, Source: only.source, Item: only.item, Origin: OriginInferred}
		}
		return nil
	}
	if len(bs) == 1 {
		return bs[0]
	}
	return nil
}

// matchFilterChain picks the filter chain Envoy would use for a connection to port with SNI:
// an exact server name, then a wildcard, then a chain with no server names.
func matchFilterChain(ls []envoystate.FilterChainTLS, address, sni string) *envoystate.FilterChainTLS {
	port := portOf(address)
	var wildcard, fallback *envoystate.FilterChainTLS
	for i := range ls {
		fc := &ls[i]
		if port == "" || portOf(fc.Address) != port {
			continue
		}
		if len(fc.ServerNames) == 0 {
			if fallback == nil {
				fallback = fc
			}
			continue
		}
		for _, n := range fc.ServerNames {
			switch {
			case n == sni:
				return fc
			case len(n) > 2 && n[:2] == "*." && wildcard == nil && sni != "" && matchesWildcard(n, sni):
				wildcard = fc
			}
		}
	}
	if wildcard != nil {
		return wildcard
	}
	return fallback
}

func matchesWildcard(pattern, host string) bool {
	suffix := pattern[1:] // ".example.com"
	return len(host) > len(suffix) && host[len(host)-len(suffix):] == suffix
}

func portOf(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			if _, err := strconv.Atoi(addr[i+1:]); err == nil {
				return addr[i+1:]
			}
			return ""
		}
	}
	return ""
}
