package audit

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/tlsprobe"
)

// Binding states, recorded on each binding in the report.
const (
	StateConverged  = "converged"  // loaded and served views match the desired certificate
	StateConverging = "converging" // different, but the desired cert changed within the grace period
	StateStale      = "stale"      // different beyond the grace period
	StateUnknown    = "unknown"    // no view to compare (admin unreachable, nothing served)
)

// loadedCert is one certificate Envoy reports holding for a binding.
type loadedCert struct {
	v     validity
	cert  *x509.Certificate // when config_dump inlined it
	where string            // "/certs" or "config_dump secret NAME"
}

func (l loadedCert) matches(d *x509.Certificate) bool {
	if l.cert != nil {
		return pki.Fingerprint(l.cert) == pki.Fingerprint(d)
	}
	return matchesSummary(l.v, d)
}

// matchesSummary compares a /certs entry with a full certificate: Envoy gives neither fingerprint
// nor issuer, so serial (as an integer) and validity window must both agree.
func matchesSummary(v validity, c *x509.Certificate) bool {
	return pki.SerialsEqual(v.serial, c.SerialNumber) &&
		v.notAfter.Unix() == c.NotAfter.Unix() &&
		(v.notBefore.IsZero() || v.notBefore.Unix() == c.NotBefore.Unix())
}

func (a *auditor) checkEnvoy(ev *EnvoyView) {
	name := ev.Config.Name
	if ev.Admin != nil {
		a.checkAdminErrors(ev)
		a.checkLoadedParse(ev)
	}
	// The caller's holdings, so that its maps may stay on the stack.
	h := holdings{located: map[*Binding][]loadedCert{}, problems: map[*Binding]string{}, keys: map[string]bool{}}
	bs := a.envoyBindings(ev, &h)
	state := map[*Binding]string{}
	why := map[*Binding]string{}
	loaded := map[*Binding][]loadedCert{}
	// A binding whose location the Envoy does not report falls back to the certificates it holds
	// with the desired leaf's names (loadedByNames), but never to one that another binding has
	// located: a pod that mounts two Secrets for one host and reads only the first holds the
	// first's leaf, not an old copy of the second.
	judgeLoaded := func(b *Binding) {
		l, ok := h.located[b]
		if !ok {
			// A binding a handshake added: not recorded in h.keys, so every binding's fallback
			// is judged against the same keys, whatever the order of the handshakes.
			l, h.problems[b] = a.loadedFor(ev.Admin, b)
		}
		if len(l) == 0 {
			for _, c := range a.loadedByNames(ev.Admin, b) {
				if !h.keys[c.v.key()] {
					l = append(l, c)
				}
			}
		}
		loaded[b] = l
		state[b], why[b] = a.checkLoaded(ev, b, l, h.problems[b])
	}
	for _, b := range bs {
		judgeLoaded(b)
	}
	if ev.Admin != nil {
		a.checkRotation(ev, bs, state)
		a.checkUpstreamVerify(ev)
		a.checkLoadedValidity(ev)
	}
	var unboundServed []tlsprobe.Result
	for _, r := range ev.Served {
		ep := endpointConfig(ev, r.Target.Address)
		b := a.bindingForEndpoint(ev, bs, ep, r.Target.SNI)
		if b == nil && len(r.Chain) > 0 && r.Chain[0] != nil {
			unboundServed = append(unboundServed, r)
		}
		if b != nil && !containsPtr(bs, b) {
			bs = append(bs, b)
			judgeLoaded(b)
		}
		if b != nil {
			b.Endpoint = r.Target.Address
			if r.Target.SNI != "" && !contains(b.SNIs, r.Target.SNI) {
				b.SNIs = append(b.SNIs, r.Target.SNI)
			}
		}
		if s := a.checkServed(name, r, b, loaded[b]); b != nil && s != "" && state[b] != StateStale {
			state[b] = s
			if s == StateUnknown && why[b] == "" {
				why[b] = "the handshake returned no certificate"
			}
		}
		rec := servedRecord{ev: ev, r: r}
		if b != nil {
			rec.source, rec.item = b.Source, b.Item
		}
		a.served = append(a.served, rec)
	}
	a.checkProcess(ev, bs, state, loaded)
	a.checkUnbound(ev, bs, &h, loaded, unboundServed)
	for _, b := range bs {
		b.State = state[b]
		if b.State == StateUnknown {
			b.Reason = why[b]
		}
		a.bindings = append(a.bindings, *b)
	}
	a.checkTrust(ev)
}

func containsPtr(bs []*Binding, b *Binding) bool {
	for _, x := range bs {
		if x == b {
			return true
		}
	}
	return false
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// checkAdminErrors turns failed admin reads into UNREACHABLE (nothing answered) or PARSE_ERROR
// (something answered, but not with what an Envoy admin sends). Each finding names the admin
// endpoint once, in its subject and message, and carries the reason as evidence.
func (a *auditor) checkAdminErrors(ev *EnvoyView) {
	snap := ev.Admin
	s := Subject{Envoy: ev.Config.Name, Endpoint: snap.AdminURL}
	errs := []struct {
		what string
		err  error
	}{{"/certs", snap.CertsErr}, {"/config_dump", snap.ConfigErr}, {"/stats", snap.StatsErr}}
	unreachable := 0
	for _, e := range errs {
		if e.err != nil && isUnreachable(e.err) {
			unreachable++
		}
	}
	if unreachable == len(errs) {
		a.add(Finding{Code: Unreachable, Severity: Warning, Subject: s,
			Message:  fmt.Sprintf("Envoy admin %s did not answer: %s", snap.AdminURL, errText(errs[0].err, snap.AdminURL)),
			Advice:   "the loaded view of this Envoy was not checked; check the admin address and that Envoy is running",
			Evidence: map[string]string{"reason": reason(errs[0].err)}})
		return
	}
	for _, e := range errs {
		if e.err == nil {
			continue
		}
		code, r := ParseError, "malformed"
		if isUnreachable(e.err) {
			code, r = Unreachable, reason(e.err)
		}
		// The probe's errors name the admin path ("GET /certs: HTTP 503 …"), the finding the URL.
		a.add(Finding{Code: code, Severity: Warning, Subject: s,
			Evidence: map[string]string{"reason": r, "endpoint": e.what},
			Message:  fmt.Sprintf("Envoy admin %s: %s", snap.AdminURL, errText(e.err, snap.AdminURL)),
			Advice:   "the checks that need " + e.what + " were skipped for this Envoy"})
	}
}

// errText is an error's message without the admin URL the finding already names, and with
// bytes that are not printable UTF-8 escaped, so that a hostile server cannot garble a report.
func errText(err error, adminURL string) string {
	msg := err.Error()
	if adminURL != "" {
		base := strings.TrimRight(adminURL, "/")
		msg = strings.ReplaceAll(msg, base+"/", "/")
		msg = strings.ReplaceAll(msg, base, "")
	}
	return printable(msg)
}

// printable keeps valid UTF-8 text as it is (names in certificates are not always ASCII) and
// writes control characters and invalid bytes as escapes.
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// checkLoadedParse reports every part of the loaded view that was there but could not be read:
// certificate bytes in a config_dump secret that are not a certificate (elided, truncated,
// garbage), trust CAs that do not parse, /certs entries whose serial or dates are not what
// Envoy prints, and config_dump entries the parser had to skip. Each is a gap in coverage: the
// checks that needed it did not run.
func (a *auditor) checkLoadedParse(ev *EnvoyView) {
	snap := ev.Admin
	parseErr := func(s Subject, field string, err error) {
		s.Envoy, s.Endpoint = ev.Config.Name, snap.AdminURL
		a.add(Finding{Code: ParseError, Severity: Warning, Subject: s,
			Evidence: map[string]string{"reason": "malformed", "field": field},
			Message:  fmt.Sprintf("Envoy %s %s: %s", ev.Config.Name, field, errText(err, snap.AdminURL)),
			Advice:   "this part of what Envoy holds could not be judged; fetch it with curl and check what Envoy printed (an admin behind a filter that elides data, or a corrupted secret)"})
	}
	for _, s := range snap.Secrets {
		where := fmt.Sprintf("config_dump %s secret %q", s.State, s.Name)
		if s.Err != nil {
			parseErr(Subject{Secret: s.Name}, where, s.Err)
			continue
		}
		if s.ChainErr != nil {
			parseErr(Subject{Secret: s.Name, File: s.CertFile}, where+" certificate chain", s.ChainErr)
		} else if s.HasCertificate && len(s.Chain) == 0 && s.CertFile == "" {
			parseErr(Subject{Secret: s.Name}, where+" certificate chain", errors.New("holds no certificate"))
		}
		if s.ValidationCAErr != nil {
			parseErr(Subject{Secret: s.Name, File: s.CAFile}, where+" trusted CA", s.ValidationCAErr)
		}
	}
	for i, c := range snap.Contexts {
		if c.Err != nil {
			parseErr(Subject{}, fmt.Sprintf("/certs entry %d", i), c.Err)
		}
		for _, cd := range slices.Concat(c.Chain, c.CA) {
			switch {
			case cd.Err != nil:
				parseErr(Subject{File: cd.Path}, "/certs entry "+cd.Path, cd.Err)
			case cd.Serial == nil && cd.SerialText != "":
				parseErr(Subject{File: cd.Path}, "/certs entry "+cd.Path, fmt.Errorf("serial number %q is not hexadecimal", cd.SerialText))
			}
		}
	}
	for _, fc := range snap.Listeners {
		where := fmt.Sprintf("listener %q filter chain %q", fc.Listener, fc.FilterChain)
		if fc.InlineCertsErr != nil {
			parseErr(Subject{}, where+" certificates", fc.InlineCertsErr)
		}
		if fc.InlineCAErr != nil {
			parseErr(Subject{File: fc.CAFile}, where+" trusted CA", fc.InlineCAErr)
		}
	}
	for _, part := range snap.ConfigSkipped {
		parseErr(Subject{}, "config_dump "+part.Part, errors.New(part.Reason))
	}
	// More entries than certdrift keeps from one Envoy: the rest were dropped unread.
	if snap.Truncated != "" {
		a.add(Finding{Code: ParseError, Severity: Warning, Subject: Subject{Envoy: ev.Config.Name, Endpoint: snap.AdminURL},
			Evidence: map[string]string{"reason": "truncated", "field": "admin"},
			Message:  fmt.Sprintf("Envoy %s admin reported more than certdrift reads from one Envoy: %s", ev.Config.Name, printable(snap.Truncated)),
			Advice:   "what was dropped was not judged; an Envoy with this many TLS contexts or secrets is unusual: check what its admin serves"})
	}
}

// unreachableError lets probes mark an error as "nothing usable answered" (for example an HTTP 5xx
// from the admin endpoint) without audit importing their error types.
type unreachableError interface{ Unreachable() bool }

func isUnreachable(err error) bool {
	var u unreachableError
	if errors.As(err, &u) {
		return u.Unreachable()
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

func reason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	}
	return "error"
}

// holdings is what one Envoy's admin shows it holding for its bindings, located once per Envoy
// (loadedFor) and read by binding inference (envoyBindings), the loaded view's judgement
// (checkEnvoy) and UNBOUND (checkUnbound).
type holdings struct {
	located  map[*Binding][]loadedCert // loadedFor, per binding
	problems map[*Binding]string       // loadedFor's problem, per binding
	keys     map[string]bool           // validity keys of every located leaf
}

// locate records what the Envoy holds for each of bs.
func (h *holdings) locate(a *auditor, snap *envoystate.Snapshot, bs []*Binding) {
	for _, b := range bs {
		h.located[b], h.problems[b] = a.loadedFor(snap, b)
		for _, l := range h.located[b] {
			h.keys[l.v.key()] = true
		}
	}
}

// loadedFor collects what the Envoy reports holding for a binding, from config_dump secrets (full
// certificates when inlined) and /certs entries whose path is the binding's file, newest first
// (see byNewest). problem says why nothing usable was found when something was there: a bound
// secret whose certificate did not parse.
func (a *auditor) loadedFor(snap *envoystate.Snapshot, b *Binding) ([]loadedCert, string) {
	if snap == nil {
		return nil, "no admin endpoint to read the loaded view from"
	}
	var out []loadedCert
	var problem string
	files := map[string]bool{}
	if isFilePath(b.File) {
		files[filepath.Clean(b.File)] = true
	}
	for _, s := range snap.Secrets {
		if !s.HasCertificate || s.State == envoystate.SecretWarming {
			continue
		}
		if b.Loads(s) || (s.CertFile != "" && files[filepath.Clean(s.CertFile)]) {
			if s.CertFile != "" {
				files[filepath.Clean(s.CertFile)] = true
			}
			if len(s.Chain) > 0 {
				out = append(out, inUse(snap, s)...)
			} else if s.ChainErr != nil {
				problem = fmt.Sprintf("the certificate of config_dump secret %q could not be parsed", s.Name)
			}
		}
	}
	byPath := a.leavesByPath(snap)
	for _, f := range slices.Sorted(maps.Keys(files)) { // sorted: the same inputs give the same report
		for _, cd := range byPath[f] {
			out = append(out, loadedCert{v: validityOfDetail(cd), where: "/certs"})
		}
	}
	out = byNewest(out)
	if len(out) == 0 && problem == "" {
		switch {
		case snap.CertsErr != nil && snap.ConfigErr != nil:
			problem = "the admin's /certs and /config_dump could not be read"
		default:
			problem = "the Envoy's admin shows no certificate for it"
		}
	}
	return out, problem
}

// loadedByNames finds what an Envoy holds for a binding whose location it does not report: the
// pod mounts the Secret, but Envoy reads it through an SDS resource file certdrift cannot see (a
// cluster's upstream context, an SDS secret name that says nothing), so neither a path nor a
// name ties them. The certificates it holds with exactly the desired leaf's DNS and URI names
// are the copies of it, old or new; a desired leaf without names matches only itself.
func (a *auditor) loadedByNames(snap *envoystate.Snapshot, b *Binding) []loadedCert {
	d := a.desired.lookup(b.Source, b.Item)
	if snap == nil || d == nil || !d.hasLeaf() {
		return nil
	}
	named := len(d.lf.DNSNames)+len(d.lf.URIs) > 0
	var out []loadedCert
	for _, s := range snap.Secrets {
		if !s.HasCertificate || s.State == envoystate.SecretWarming || len(s.Chain) == 0 || s.Chain[0] == nil {
			continue
		}
		leaf := s.Chain[0]
		if pki.Fingerprint(leaf) == d.fingerprint() ||
			(named && pki.SameNames(leaf.DNSNames, d.lf.DNSNames) && pki.SameNames(uriStrings(leaf), d.lf.URIs)) {
			out = append(out, loadedCert{v: validityOf(leaf), cert: leaf, where: "config_dump secret " + s.Name + " (same names as the desired certificate)"})
		}
	}
	if len(out) == 0 && named {
		for _, c := range snap.Contexts {
			for _, cd := range c.Chain {
				if pki.SameNames(cd.DNSNames, d.lf.DNSNames) && pki.SameNames(cd.URIs, d.lf.URIs) {
					out = append(out, loadedCert{v: validityOfDetail(cd), where: "/certs (same names as the desired certificate)"})
				}
			}
		}
	}
	return byNewest(out)
}

// isFilePath reports whether a path Envoy printed names a file: "<inline>" (SDS-delivered bytes)
// and "<trust domain>: <inline>" are shared by every inline certificate and locate nothing.
func isFilePath(p string) bool {
	return p != "" && !strings.Contains(p, "<inline>")
}

func validityOfDetail(cd envoystate.CertDetail) validity {
	return validity{serial: cd.Serial, notBefore: cd.ValidFrom, notAfter: cd.Expiration, subject: firstName(cd)}
}

// byNewest orders what an Envoy holds for one binding newest first (latest notBefore, then
// latest notAfter, then serial), with repeats removed: /certs lists one entry per live TLS
// context in no defined order, and a draining listener's context can outlive the one that
// replaced it, so the position of an entry says nothing. The newest is taken as the one in use
// when none is the desired certificate.
func byNewest(ls []loadedCert) []loadedCert {
	slices.SortStableFunc(ls, func(x, y loadedCert) int {
		return cmp.Or(
			y.v.notBefore.Compare(x.v.notBefore),
			y.v.notAfter.Compare(x.v.notAfter),
			compareSerial(y.v.serial, x.v.serial),
			compareBool(x.cert == nil, y.cert == nil), // a full certificate says more than /certs
			cmp.Compare(x.where, y.where),
		)
	})
	seen := map[string]bool{}
	out := ls[:0]
	for _, l := range ls {
		if seen[l.v.key()] {
			continue
		}
		seen[l.v.key()] = true
		out = append(out, l)
	}
	return out
}

func compareSerial(x, y *big.Int) int {
	switch {
	case x == nil && y == nil:
		return 0
	case x == nil:
		return -1
	case y == nil:
		return 1
	}
	return x.Cmp(y)
}

// leavesByPath indexes the leaves of /certs by cleaned path, once per snapshot, so that finding
// what an Envoy holds for each of its bindings stays linear in the number of contexts. Every
// cert_chain entry of a context is a leaf: Envoy lists one per tls_certificate (an RSA and an
// ECDSA certificate on one context are two entries), never intermediates.
func (a *auditor) leavesByPath(snap *envoystate.Snapshot) map[string][]envoystate.CertDetail {
	if m, ok := a.pathIndex[snap]; ok {
		return m
	}
	m := map[string][]envoystate.CertDetail{}
	for _, c := range snap.Contexts {
		for _, cd := range c.Chain {
			p := filepath.Clean(cd.Path)
			m[p] = append(m[p], cd)
		}
	}
	a.pathIndex[snap] = m
	return m
}

// inUse returns what Envoy actually serves for an SDS secret whose certificate config_dump
// inlines. config_dump shows the secret Envoy accepted, which is not always what its TLS contexts
// use: when a new pair fails to load (e.g. the key does not match), Envoy 1.36 and 1.40 keep the
// new secret in config_dump while every TLS context keeps the old certificate, and only /certs
// shows that. So when /certs has no context with the secret's leaf, the contexts with the same
// names are what is loaded.
func inUse(snap *envoystate.Snapshot, s envoystate.Secret) []loadedCert {
	leaf := s.Chain[0]
	accepted := loadedCert{v: validityOf(leaf), cert: leaf, where: "config_dump secret " + s.Name}
	if snap.CertsErr != nil || len(snap.Contexts) == 0 {
		return []loadedCert{accepted}
	}
	var same []loadedCert
	seen := map[string]bool{}
	for _, c := range snap.Contexts {
		for _, cd := range c.Chain {
			v := validityOfDetail(cd)
			if matchesSummary(v, leaf) {
				return []loadedCert{accepted}
			}
			if pki.SameNames(cd.DNSNames, leaf.DNSNames) && pki.SameNames(cd.URIs, uriStrings(leaf)) && !seen[v.key()] {
				seen[v.key()] = true
				same = append(same, loadedCert{v: v, where: "/certs (config_dump secret " + s.Name + " holds a certificate no TLS context uses)"})
			}
		}
	}
	if len(same) == 0 {
		return []loadedCert{accepted}
	}
	return same
}

func uriStrings(c *x509.Certificate) []string {
	out := make([]string, 0, len(c.URIs))
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	return out
}

// firstName names a certificate /certs describes, as certName names it from any view.
func firstName(cd envoystate.CertDetail) string {
	return certName(cd.DNSNames, cd.URIs, "", cd.Serial)
}

// stale decides between converging and stale for a difference first seen now: the desired
// certificate changed at changedAt, and Envoy is allowed the grace period to catch up.
func (a *auditor) stale(d *desiredCert) (bool, time.Duration) {
	age := a.now.Sub(d.changedAt)
	return d.changedAt.IsZero() || age > a.policy.Grace.D(), age
}

// checkLoaded compares the loaded view of a binding with its desired certificate and returns the
// binding's state, with the reason when it is unknown. The binding is converged when any
// certificate the Envoy holds for it is the desired one; the others are lingering contexts
// (LINGERING_CONTEXT, info). Otherwise the newest is reported as loaded, and the rest as
// lingering: the verdict is the same for every order Envoy lists them in.
func (a *auditor) checkLoaded(ev *EnvoyView, b *Binding, loaded []loadedCert, problem string) (string, string) {
	d := a.desired.lookup(b.Source, b.Item)
	switch {
	case d == nil:
		return StateUnknown, "no desired certificate " + b.Source + " was found"
	case d.leafX() == nil:
		return StateUnknown, "the desired certificate could not be read"
	case len(loaded) == 0:
		return StateUnknown, problem
	}
	inUse := -1
	for i, l := range loaded {
		if l.matches(d.leafX()) {
			inUse = i
			break
		}
	}
	state := StateConverged
	if inUse < 0 {
		inUse = 0
		if isStale, age := a.stale(d); !isStale {
			state = StateConverging
		} else {
			state = StateStale
			a.reportStaleLoaded(ev, b, d, loaded[0], age)
		}
	}
	for i, l := range loaded {
		if i != inUse {
			a.reportLingering(ev, b, l, loaded[inUse])
		}
	}
	return state, ""
}

func (a *auditor) reportStaleLoaded(ev *EnvoyView, b *Binding, d *desiredCert, l loadedCert, age time.Duration) {
	ev2 := desiredEvidence(d)
	ev2["loaded_serial"] = pki.SerialHex(l.v.serial)
	ev2["loaded_not_after"] = l.v.notAfter.UTC().Format(time.RFC3339)
	ev2["loaded_from"] = l.where
	if l.cert != nil {
		ev2["loaded_fingerprint_sha256"] = l.v.fingerprint
	}
	advice := "this Envoy did not reload: use file-based or xDS SDS instead of a static TLS context, or restart it"
	if b.Secret != "" {
		// It already takes the certificate from SDS, so the advice to move to SDS would be wrong:
		// an SDS Envoy that keeps an old certificate rejected the update or never received it.
		advice = "this Envoy takes the certificate from SDS but did not load the new one: look for ROTATION_FAILED and KEY_MISMATCH (a rejected pair), check that the SDS source watches the volume's directory (watched_directory) and Envoy's log, then restart it"
	}
	a.add(Finding{Code: StaleLoaded, Severity: a.staleSeverity(l.v), Subject: a.bindingSubject(ev, b), Evidence: ev2, Inferred: b.Inferred(), Since: timePtr(d.changedAt),
		Message: fmt.Sprintf("Envoy %s holds serial %s for %s, but the desired certificate (serial %s) changed %s ago",
			ev.Config.Name, pki.SerialHex(l.v.serial), d.name(), pki.SerialHex(d.lf.Serial), roundDur(age)),
		Advice: advice})
}

// reportLingering reports a certificate an Envoy holds for a binding beside the one it uses.
func (a *auditor) reportLingering(ev *EnvoyView, b *Binding, l, inUse loadedCert) {
	a.add(Finding{Code: LingeringContext, Severity: Info, Subject: a.bindingSubject(ev, b), Inferred: b.Inferred(),
		Evidence: map[string]string{
			"lingering_serial":    pki.SerialHex(l.v.serial),
			"lingering_not_after": l.v.notAfter.UTC().Format(time.RFC3339),
			"lingering_from":      l.where,
			"in_use_serial":       pki.SerialHex(inUse.v.serial),
		},
		Message: fmt.Sprintf("Envoy %s still holds serial %s for %s beside serial %s (a draining listener or a replaced context)",
			ev.Config.Name, pki.SerialHex(l.v.serial), b.Source, pki.SerialHex(inUse.v.serial)),
		Advice: "nothing to do if it goes away after the drain time; if it stays, restart the Envoy"})
}

// staleSeverity is critical when the stale certificate is expired or about to be, else warning:
// an old certificate that is still valid for weeks is drift, not yet an outage.
func (a *auditor) staleSeverity(v validity) Severity {
	if !v.notAfter.IsZero() && (v.notAfter.Sub(a.now) <= 0 || a.expiring(v) == Critical) {
		return Critical
	}
	return Warning
}

func (a *auditor) bindingSubject(ev *EnvoyView, b *Binding) Subject {
	return Subject{Envoy: ev.Config.Name, Source: b.Source, Item: b.Item, Secret: b.Secret, File: b.File, Workload: b.Workload}
}

func desiredEvidence(d *desiredCert) map[string]string {
	return map[string]string{
		"desired_fingerprint_sha256": d.fingerprint(),
		"desired_serial":             pki.SerialHex(d.lf.Serial),
		"desired_not_after":          d.lf.NotAfter.UTC().Format(time.RFC3339),
		"desired_changed_at":         d.changedAt.UTC().Format(time.RFC3339),
	}
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// checkLoadedValidity judges the validity of every certificate the Envoy holds, bound to a desired
// source or not: the leaves and CAs of /certs, the chains and trust bundles of every config_dump
// secret (static, active or warming), and certificates inlined in listeners. Certificates seen
// in the desired view were judged there already (seenValidity).
func (a *auditor) checkLoadedValidity(ev *EnvoyView) {
	snap := ev.Admin
	name := ev.Config.Name
	for _, c := range snap.Contexts {
		for _, cd := range c.Chain {
			a.checkValidityOf("loaded", Subject{Envoy: name, File: cd.Path}, validityOfDetail(cd), "certificate", false)
		}
		for _, cd := range c.CA {
			v := validityOfDetail(cd)
			v.subject = "CA " + v.subject
			a.checkValidityOf("loaded", Subject{Envoy: name, File: cd.Path}, v, "CA certificate", false)
		}
	}
	for _, s := range snap.Secrets {
		subj := Subject{Envoy: name, Secret: s.Name, File: s.CertFile}
		a.checkValidity("loaded", subj, s.Chain, false)
		subj.File = s.CAFile
		a.checkBundleValidity("loaded", subj, s.ValidationCA)
		for _, td := range slices.Sorted(maps.Keys(s.SPIFFEBundles)) {
			a.checkBundleValidity("loaded", subj, s.SPIFFEBundles[td])
		}
	}
	for _, fc := range snap.Listeners {
		subj := Subject{Envoy: name, File: "listener " + fc.Listener}
		a.checkValidity("loaded", subj, fc.InlineCerts, false)
		a.checkBundleValidity("loaded", subj, fc.InlineCA)
		for _, td := range slices.Sorted(maps.Keys(fc.SPIFFEBundles)) {
			a.checkBundleValidity("loaded", subj, fc.SPIFFEBundles[td])
		}
	}
}

// checkBundleValidity judges each CA of a trust bundle. An expired CA beside valid ones is a
// warning (the bundle still verifies leaves of the others); a bundle with no valid CA left
// rejects every peer, which is critical.
func (a *auditor) checkBundleValidity(view string, s Subject, bundle []*x509.Certificate) {
	anyValid := false
	for _, c := range bundle {
		if c != nil && !a.now.Before(c.NotBefore) && a.now.Before(c.NotAfter) {
			anyValid = true
		}
	}
	for _, c := range bundle {
		if c == nil {
			continue
		}
		from := len(a.findings)
		v := validityOf(c)
		v.subject = "CA " + v.subject
		a.checkValidityOf(view, s, v, "CA certificate", false)
		if anyValid {
			for i := from; i < len(a.findings); i++ {
				if a.findings[i].Code == Expired {
					a.findings[i].Severity = Warning
					a.findings[i].Message += " (the bundle holds other CAs that are still valid)"
				}
			}
		}
	}
}

// checkRotation reports ROTATION_FAILED from Envoy's own evidence: SDS updates it rejected (the
// counters only grow, so they matter when the binding is still not converged) and secrets stuck
// warming.
func (a *auditor) checkRotation(ev *EnvoyView, bs []*Binding, state map[*Binding]string) {
	snap := ev.Admin
	// Stats carry the secret name sanitised ("kubernetes://ns/x" → "kubernetes_ns/x"); map it back.
	bySecret := map[string]*Binding{}
	secretName := map[string]string{}
	for _, s := range snap.Secrets {
		secretName[envoystate.SanitizeStatName(s.Name)] = s.Name
	}
	for _, b := range bs {
		if b.Secret != "" {
			bySecret[envoystate.SanitizeStatName(b.Secret)] = b
		}
	}
	for statName, n := range snap.Stats.KeyRotationFailed() {
		if n == 0 {
			continue
		}
		name := statName
		if real, ok := secretName[statName]; ok {
			name = real
		}
		b := bySecret[statName]
		sev, note := Warning, "; the loaded certificate was not compared with a desired one"
		s := Subject{Envoy: ev.Config.Name, Secret: name}
		if b != nil {
			s = a.bindingSubject(ev, b)
			switch state[b] {
			case StateConverged:
				sev, note = Info, "; a later update succeeded and the desired certificate is loaded"
			case StateStale, StateConverging:
				sev, note = Critical, "; Envoy still holds the old certificate"
			}
		}
		a.add(Finding{Code: RotationFailed, Severity: sev, Subject: s,
			Evidence: map[string]string{"failed_updates": fmt.Sprint(n)},
			Message:  fmt.Sprintf("Envoy %s rejected %s of secret %q%s", ev.Config.Name, plural(int(n), "update"), name, note),
			Advice:   "check the new certificate and key (KEY_MISMATCH, PARSE_ERROR) and Envoy's log; Envoy keeps the old certificate until a valid pair arrives"})
	}
	for _, s := range snap.Secrets {
		if s.State != envoystate.SecretWarming {
			continue
		}
		a.add(Finding{Code: RotationFailed, Severity: Warning, Subject: Subject{Envoy: ev.Config.Name, Secret: s.Name},
			Message: fmt.Sprintf("secret %q on Envoy %s is still warming: it was requested but never became active", s.Name, ev.Config.Name),
			Advice:  "the SDS server has not delivered it (or delivered something Envoy rejected); listeners that need it are not serving"})
	}
}

// checkServed judges one handshake and returns the binding state it implies ("" when it implies
// nothing).
func (a *auditor) checkServed(envoy string, r tlsprobe.Result, b *Binding, loaded []loadedCert) string {
	s := Subject{Envoy: envoy, Endpoint: r.Target.Address, SNI: r.Target.SNI}
	if b != nil {
		s.Source, s.Item, s.Secret, s.File = b.Source, b.Item, b.Secret, b.File
	}
	// A handshake that failed after the server sent its chain (an mTLS peer rejecting our client
	// certificate) still shows what is served; only no chain at all is a gap in coverage.
	if len(r.Chain) == 0 {
		err := r.Err
		if err == nil {
			err = errors.New("no certificate presented")
		}
		a.add(Finding{Code: Unreachable, Severity: Warning, Subject: s,
			Evidence: map[string]string{"reason": r.Reason},
			Message:  fmt.Sprintf("TLS handshake with %s (SNI %s) failed: %v", r.Target.Address, quote(r.Target.SNI), err),
			Advice:   "the served view of this endpoint was not checked; check the address and that the listener is up"})
		return StateUnknown
	}
	leaf := r.Chain[0]
	fp := pki.Fingerprint(leaf)
	a.checkValidity("served", s, r.Chain, true)
	if r.Target.SNI != "" && !pki.CoversHost(leaf, r.Target.SNI) {
		a.add(Finding{Code: HostnameMismatch, Severity: Critical, Subject: s,
			Evidence: map[string]string{"served_fingerprint_sha256": fp, "served_dns_names": strings.Join(leaf.DNSNames, ",")},
			Message:  fmt.Sprintf("%s served %s for SNI %q, which it does not cover", r.Target.Address, quote(certNameOf(leaf)), r.Target.SNI),
			Advice:   "check the listener's server_names and which certificate its filter chain uses"})
	}
	var d *desiredCert
	if b != nil {
		d = a.desired.lookup(b.Source, b.Item)
	}
	if d == nil || !d.hasLeaf() || d.fingerprint() != fp {
		a.checkWeak("served", s, leaf)
	}
	if len(loaded) > 0 && !anyMatches(loaded, leaf) {
		a.add(Finding{Code: LoadedServedMismatch, Severity: Warning, Subject: s, Inferred: b != nil && b.Inferred(),
			Evidence: map[string]string{"served_fingerprint_sha256": fp, "served_serial": pki.SerialHex(leaf.SerialNumber), "loaded_serial": pki.SerialHex(loaded[0].v.serial)},
			Message:  fmt.Sprintf("Envoy %s reports serial %s loaded for %s, but %s served serial %s", envoy, pki.SerialHex(loaded[0].v.serial), s.Source, r.Target.Address, pki.SerialHex(leaf.SerialNumber)),
			Advice:   "an old TLS context is still serving (draining listener or another filter chain); check server_names and the listener's filter chains"})
	}
	if d == nil || !d.hasLeaf() {
		return ""
	}
	if d.fingerprint() == fp {
		// The chain is judged against the desired CA bundle only for the desired leaf: an old
		// leaf from a rotated CA does not chain to the new bundle, and that is STALE_SERVED,
		// not a missing intermediate.
		a.checkServedChain(s, r.Chain, d)
		return StateConverged
	}
	isStale, age := a.stale(d)
	if !isStale {
		return StateConverging
	}
	ev := desiredEvidence(d)
	ev["served_fingerprint_sha256"] = fp
	ev["served_serial"] = pki.SerialHex(leaf.SerialNumber)
	ev["served_not_after"] = leaf.NotAfter.UTC().Format(time.RFC3339)
	a.add(Finding{Code: StaleServed, Severity: a.staleSeverity(validityOf(leaf)), Subject: s, Evidence: ev, Inferred: b.Inferred(), Since: timePtr(d.changedAt),
		Message: fmt.Sprintf("%s (SNI %s) serves %s, not the desired certificate of %s (%s), which changed %s ago",
			r.Target.Address, quote(r.Target.SNI), short(fp), d.name(), short(d.fingerprint()), roundDur(age)),
		Advice: "this Envoy did not reload; restart it, or move it to file-based or xDS SDS so it reloads by itself"})
	return StateStale
}

func anyMatches(loaded []loadedCert, c *x509.Certificate) bool {
	for _, l := range loaded {
		if l.matches(c) {
			return true
		}
	}
	return false
}

// checkServedChain reports CHAIN_INCOMPLETE when the served chain is out of order or does not
// build to the desired CA bundle although the desired chain does (an intermediate was dropped).
func (a *auditor) checkServedChain(s Subject, chain []*x509.Certificate, d *desiredCert) {
	var roots []*x509.Certificate
	if x := d.x(); len(x.CA) > 0 {
		roots = x.CA
	}
	rep := a.chains.Check(chain, roots)
	if rep.OK() {
		return
	}
	a.add(Finding{Code: ChainIncomplete, Severity: Warning, Subject: s,
		Evidence: map[string]string{"served_chain_length": fmt.Sprint(len(chain)), "desired_chain_length": fmt.Sprint(len(d.x().Chain))},
		Message:  fmt.Sprintf("served chain for %s: %s", d.name(), rep.String()),
		Advice:   "serve the full chain (leaf, then intermediates in order) so clients that lack the intermediate can verify it"})
}

// short names a fingerprint in a message: labelled, so that it is not taken for a serial, and cut
// to 16 hex digits (the evidence has it whole; the table cuts it further).
func short(fp string) string {
	if len(fp) > 16 {
		fp = fp[:16]
	}
	return "sha256:" + fp
}

// endpointConfig finds the configured endpoint a handshake was made to.
func endpointConfig(ev *EnvoyView, address string) config.Endpoint {
	for _, ep := range ev.Config.Endpoints {
		if ep.Address == address {
			return ep
		}
	}
	return config.Endpoint{Address: address}
}
