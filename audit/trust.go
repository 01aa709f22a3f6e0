package audit

import (
	"cmp"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/envoystate"
)

// Trust is a view of its own: the CA bundle an Envoy has loaded in a validation context is bound
// to the desired bundle it is read from, the way leaves are (file path, watched directory, SDS
// secret name, Kubernetes mounts), and judged against it. A static validation context never
// reloads, so after a CA rotation the Envoy keeps trusting the old CA only (seed 003), and every
// peer presenting a leaf of the new CA is rejected although every Secret is right.

// loadedBundle is one trust bundle an Envoy holds.
type loadedBundle struct {
	where  string // "config_dump secret NAME", "/certs ca_cert PATH"
	secret string // SDS validation secret name
	file   string // CA file, as Envoy prints it
	dir    string // SDS watched_directory
	// cas is the whole bundle (config_dump inlines it); nil when only /certs saw it. /certs
	// lists every CA of the bundle from Envoy 1.40 on (listsAll), and only the first before.
	cas      []*x509.Certificate
	listed   []validity
	listsAll bool
}

// trustBinding ties loaded bundles to one desired bundle.
type trustBinding struct {
	d       *desiredCert
	origin  string
	loaded  []loadedBundle
	secret  string
	file    string
	origins map[string]bool
}

// loadedBundles lists the trust bundles of a snapshot that can be bound: validation secrets of
// config_dump (active or static) and the CA of each /certs context read from a file. An inline
// /certs CA (SDS-delivered) is the same bundle config_dump shows in full.
func loadedBundles(snap *envoystate.Snapshot) []loadedBundle {
	var out []loadedBundle
	for _, s := range snap.Secrets {
		if !s.HasValidation || s.State == envoystate.SecretWarming || len(s.ValidationCA) == 0 {
			continue
		}
		out = append(out, loadedBundle{where: "config_dump secret " + s.Name, secret: s.Name, file: s.CAFile, dir: cmp.Or(s.CAWatchedDir, s.WatchedDir), cas: s.ValidationCA})
	}
	listsAll := listsAllCAs(snap)
	seen := map[string]bool{}
	for _, c := range snap.Contexts {
		if len(c.CA) == 0 || !isFilePath(c.CA[0].Path) {
			continue
		}
		lb := loadedBundle{where: "/certs ca_cert " + c.CA[0].Path, file: c.CA[0].Path, listsAll: listsAll}
		keys := make([]string, 0, len(c.CA))
		for _, cd := range c.CA {
			v := validityOfDetail(cd)
			lb.listed = append(lb.listed, v)
			keys = append(keys, v.key())
		}
		slices.Sort(keys)
		k := filepath.Clean(lb.file) + "|" + strings.Join(keys, ",")
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, lb)
	}
	return out
}

// listsAllCAs reports whether an Envoy's /certs lists every CA of a trust bundle: Envoy 1.40 does
// (each ca_cert entry is one CA of the file), 1.36 printed only the first. An Envoy whose version
// is unknown lists them all if any context shows more than one.
func listsAllCAs(snap *envoystate.Snapshot) bool {
	var major, minor int
	if _, err := fmt.Sscanf(snap.ServerVersion, "%d.%d", &major, &minor); err == nil && (major > 1 || major == 1 && minor >= 40) {
		return true
	}
	for _, c := range snap.Contexts {
		if len(c.CA) > 1 {
			return true
		}
	}
	return false
}

// trustBindings binds each loaded bundle to a desired bundle, most trusted rule first: explicit
// bindings (config, or the pod's mounts in Kubernetes mode) by CA file, directory or SDS name;
// then the desired CA file with the same path; then a desired directory source watched by the
// validation secret; then a desired source named like the SDS secret.
func (a *auditor) trustBindings(ev *EnvoyView) []*trustBinding {
	var out []*trustBinding
	byRef := map[[2]string]*trustBinding{}
	bind := func(d *desiredCert, origin string, lb loadedBundle) {
		if d == nil || (!d.it.HasCA() && d.it.CAErr == nil) {
			return
		}
		k := [2]string{d.source, d.item}
		tb := byRef[k]
		if tb == nil {
			tb = &trustBinding{d: d, origin: origin, origins: map[string]bool{}}
			byRef[k] = tb
			out = append(out, tb)
		}
		tb.secret = cmp.Or(tb.secret, lb.secret)
		tb.file = cmp.Or(tb.file, lb.file)
		if !slices.ContainsFunc(tb.loaded, func(x loadedBundle) bool { return x.where == lb.where }) {
			tb.loaded = append(tb.loaded, lb)
		}
	}
	for _, lb := range loadedBundles(ev.Admin) {
		if cbs := explicitTrustMatches(ev.Config.Bindings, lb); len(cbs) > 0 {
			for _, cb := range cbs {
				bind(a.desired.lookup(cb.Source, cb.Item), cmp.Or(cb.Origin, OriginConfig), lb)
			}
			continue
		}
		if lb.file != "" {
			if d := a.desired.byCA[filepath.Clean(lb.file)]; d != nil {
				bind(d, OriginPath, lb)
				continue
			}
		}
		if lb.dir != "" {
			for _, d := range a.desired.byDir[filepath.Clean(lb.dir)] {
				bind(d, OriginPath, lb)
			}
			if len(a.desired.byDir[filepath.Clean(lb.dir)]) > 0 {
				continue
			}
		}
		if lb.secret != "" {
			bind(a.desired.lookup(lb.secret, ""), OriginSDSName, lb)
		}
	}
	return out
}

// explicitTrustMatches returns the explicit bindings that locate lb, by the most precise rule
// that finds any: the CA file, else the SDS secret name, else the directory. Several sources of a
// projected volume share its directory; only the CA file tells them apart.
func explicitTrustMatches(cbs []config.Binding, lb loadedBundle) []config.Binding {
	rules := []func(config.Binding) bool{
		func(cb config.Binding) bool {
			return cb.CAFile != "" && lb.file != "" && filepath.Clean(cb.CAFile) == filepath.Clean(lb.file)
		},
		func(cb config.Binding) bool { return cb.Secret != "" && lb.secret != "" && cb.Secret == lb.secret },
		func(cb config.Binding) bool {
			return cb.Dir != "" && lb.dir != "" && filepath.Clean(cb.Dir) == filepath.Clean(lb.dir)
		},
	}
	for _, rule := range rules {
		var out []config.Binding
		for _, cb := range cbs {
			if rule(cb) {
				out = append(out, cb)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return nil
}

// checkTrust judges the trust bindings of one Envoy: a binding is converged when any bundle the
// Envoy holds for it is the desired bundle (the same set of CAs; for /certs, which shows only a
// bundle's first CA, the desired bundle's first CA), the others lingering; else converging within
// the grace period of the desired change, else STALE_TRUST.
func (a *auditor) checkTrust(ev *EnvoyView) {
	if ev.Admin == nil {
		return
	}
	for _, tb := range a.trustBindings(ev) {
		b := Binding{Envoy: ev.Config.Name, Source: tb.d.source, Item: tb.d.item, Secret: tb.secret, File: tb.file,
			Origin: tb.origin, Trust: true, State: StateUnknown}
		if ev.Pod != nil {
			b.Workload = ev.Pod.Workload
		}
		desired := tb.d.x().CA
		slices.SortStableFunc(tb.loaded, func(x, y loadedBundle) int {
			return cmp.Or(compareBool(x.cas == nil, y.cas == nil), cmp.Compare(x.where, y.where))
		})
		switch {
		case len(desired) == 0:
			b.Reason = "the desired CA bundle could not be read"
		default:
			inUse := slices.IndexFunc(tb.loaded, func(lb loadedBundle) bool { return bundleMatches(lb, desired) })
			if inUse >= 0 {
				b.State = StateConverged
			} else if isStale, age := a.stale(tb.d); !isStale {
				b.State, inUse = StateConverging, 0
			} else {
				b.State, inUse = StateStale, 0
				a.reportStaleTrust(ev, &b, tb, tb.loaded[0], age)
			}
			for i, lb := range tb.loaded {
				if i != inUse && !sameBundle(lb, tb.loaded[inUse]) {
					a.add(Finding{Code: LingeringContext, Severity: Info, Subject: trustSubject(ev, &b),
						Evidence: map[string]string{"lingering_from": lb.where, "lingering_serial": pki.SerialHex(bundleFirst(lb).serial), "in_use_serial": pki.SerialHex(bundleFirst(tb.loaded[inUse]).serial)},
						Message:  fmt.Sprintf("Envoy %s also holds trust bundle %s for %s beside %s", ev.Config.Name, lb.where, tb.d.name(), tb.loaded[inUse].where),
						Advice:   "nothing to do if it goes away after the drain time; if it stays, restart the Envoy"})
				}
			}
		}
		a.bindings = append(a.bindings, b)
	}
}

func trustSubject(ev *EnvoyView, b *Binding) Subject {
	return Subject{Envoy: ev.Config.Name, Workload: b.Workload, Source: b.Source, Item: b.Item, Secret: b.Secret, File: b.File}
}

func bundleFirst(lb loadedBundle) validity {
	switch {
	case len(lb.cas) > 0:
		return validityOf(lb.cas[0])
	case len(lb.listed) > 0:
		return lb.listed[0]
	}
	return validity{}
}

// bundleMatches: a whole bundle must hold exactly the desired CAs (order aside: a bundle's order
// does not change what it trusts). /certs of an Envoy before 1.40 shows only the first CA of the
// file it read, which for the desired file is its first CA.
func bundleMatches(lb loadedBundle, desired []*x509.Certificate) bool {
	switch {
	case lb.cas != nil:
		return sameFingerprints(lb.cas, desired)
	case lb.listsAll:
		return slices.Equal(listedKeys(lb.listed), listedKeys(validities(desired)))
	case len(lb.listed) > 0:
		return matchesSummary(lb.listed[0], desired[0])
	}
	return false
}

func sameBundle(x, y loadedBundle) bool {
	if x.cas != nil && y.cas != nil {
		return sameFingerprints(x.cas, y.cas)
	}
	return slices.Equal(listedKeys(bundleValidities(x)), listedKeys(bundleValidities(y)))
}

func bundleValidities(lb loadedBundle) []validity {
	if lb.cas != nil {
		return validities(lb.cas)
	}
	return lb.listed
}

func validities(cs []*x509.Certificate) []validity {
	out := make([]validity, 0, len(cs))
	for _, c := range cs {
		if c != nil {
			out = append(out, validityOf(c))
		}
	}
	return out
}

func listedKeys(vs []validity) []string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.key())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func fingerprints(cs []*x509.Certificate) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		if c != nil {
			out = append(out, pki.Fingerprint(c))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func sameFingerprints(x, y []*x509.Certificate) bool {
	return slices.Equal(fingerprints(x), fingerprints(y))
}

// reportStaleTrust reports STALE_TRUST. It is critical when what the Envoy trusts shares no CA
// with the desired bundle: every peer already presenting a leaf of the new CA is rejected now.
func (a *auditor) reportStaleTrust(ev *EnvoyView, b *Binding, tb *trustBinding, lb loadedBundle, age time.Duration) {
	d := tb.d
	desired := fingerprints(d.x().CA)
	ev2 := map[string]string{
		"desired_fingerprint_sha256": pki.Fingerprint(d.x().CA[0]),
		"desired_cas":                fmt.Sprint(len(d.x().CA)),
		"desired_changed_at":         d.changedAt.UTC().Format(time.RFC3339),
		"loaded_from":                lb.where,
	}
	first := bundleFirst(lb)
	ev2["loaded_serial"] = pki.SerialHex(first.serial)
	ev2["loaded_not_after"] = first.notAfter.UTC().Format(time.RFC3339)
	var serials []string
	for _, v := range bundleValidities(lb) {
		serials = append(serials, pki.SerialHex(v.serial))
	}
	slices.Sort(serials)
	ev2["loaded_serials"] = strings.Join(serials, ",")
	common := false
	if lb.cas != nil {
		loaded := fingerprints(lb.cas)
		ev2["loaded_fingerprints_sha256"] = strings.Join(loaded, ",")
		var missing []string
		for _, fp := range desired {
			if slices.Contains(loaded, fp) {
				common = true
			} else {
				missing = append(missing, fp)
			}
		}
		ev2["missing_fingerprints_sha256"] = strings.Join(missing, ",")
	} else {
		common = slices.ContainsFunc(d.x().CA, func(c *x509.Certificate) bool {
			return slices.ContainsFunc(lb.listed, func(v validity) bool { return matchesSummary(v, c) })
		})
	}
	sev := Warning
	if !common {
		sev = Critical
	}
	a.add(Finding{Code: StaleTrust, Severity: sev, Subject: trustSubject(ev, b), Evidence: ev2, Since: timePtr(d.changedAt),
		Message: fmt.Sprintf("Envoy %s trusts %s (%s), not the desired CA bundle of %s (%s), which changed %s ago",
			ev.Config.Name, trustDescription(lb), lb.where, d.name(), plural(len(d.x().CA), "CA"), roundDur(age)),
		Advice: "this Envoy did not reload its validation context: restart it, and deliver the trust bundle by SDS (file-based with watched_directory, or xDS) so that it reloads by itself"})
}

func trustDescription(lb loadedBundle) string {
	switch {
	case lb.cas != nil:
		return plural(len(lb.cas), "CA")
	case lb.listsAll:
		return plural(len(lb.listed), "CA")
	}
	return "a bundle whose first CA is serial " + pki.SerialHex(bundleFirst(lb).serial)
}
