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
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
)

// Preflight answers "if I rotate to this now, who breaks?" (issue 21): it judges candidate
// leaves and CA bundles against what every Envoy has loaded and serves now, with the bindings an
// audit of the same inputs makes (Run), so a rotation is checked against the fleet as it is, not
// as the Secrets say it should be. Like Run it is pure: the caller gathers one round.
//
// Three questions, per declared pairing (config pairings, the links checkLivePairings checks on
// live pods) that presents or verifies a candidate:
//   - does each verifier's currently loaded trust accept the new leaf? Peers do not converge
//     together (kubelet sync, SDS, restarts), so for a while the new leaf meets the old trust
//     (Envoy Gateway #4891, seed 003);
//   - does the new bundle accept the leaves its peers present now (served, else loaded)?
//   - once both are in place, does the new bundle accept the new leaf?
//
// and, per Envoy bound to a candidate's source, whether it reloads the candidate by itself (SDS)
// or needs a restart (a static context, a component that never reloads, a subPath mount, or a
// binding already stale). Peers certdrift cannot read (a control plane, which is not an Envoy)
// are assumed to hold their source as it is now, and said so.

// Preflight verdicts.
const (
	PreflightSafe    = "safe"    // every judged handshake accepts, nothing left unknown
	PreflightBreaks  = "breaks"  // a handshake would be rejected
	PreflightUnknown = "unknown" // nothing rejects, but something could not be judged
)

// Results of one preflight handshake.
const (
	HandshakeAccepts = "accepts"
	HandshakeRejects = "rejects"
	HandshakeUnknown = "unknown"
)

// Phases of a rotation in which a handshake is judged.
const (
	// PhaseNewLeafCurrentTrust: the presenter has loaded the new leaf, the verifier still holds
	// the trust it has loaded now.
	PhaseNewLeafCurrentTrust = "new_leaf_current_trust"
	// PhaseCurrentLeafNewBundle: the verifier has loaded the new bundle, the presenter still
	// presents the leaf it presents now.
	PhaseCurrentLeafNewBundle = "current_leaf_new_bundle"
	// PhaseNewLeafNewBundle: both sides converged on the candidates.
	PhaseNewLeafNewBundle = "new_leaf_new_bundle"
	// PhaseNewLeafSNI: a client asking for an SNI the source is served under gets the new leaf.
	PhaseNewLeafSNI = "new_leaf_sni"
	// PhaseNewLeafOwnKey: an Envoy loading the source takes the new leaf with the private key
	// given beside it; it refuses a pair that does not match (audit's KEY_MISMATCH once written).
	PhaseNewLeafOwnKey = "new_leaf_own_key"
	// PhaseNewLeafOwnBundle: the source's own CA bundle (the candidate's, else the one it holds
	// now) verifies its new leaf, as audit checks every desired source (CA_BUNDLE_GAP).
	PhaseNewLeafOwnBundle = "new_leaf_own_bundle"
)

// Reload modes: how a candidate reaches an Envoy.
const (
	ReloadSelf    = "reloads" // SDS (file-based or xDS): the Envoy loads it by itself
	ReloadRestart = "restart" // only a restart loads it
	ReloadUnknown = "unknown" // certdrift cannot tell
)

// PreflightOptions are the caller's words for the steps.
type PreflightOptions struct {
	// AuditCommand is how to run the audit that checks convergence, as the user would type it.
	AuditCommand string
}

// PreflightReport is the answer of one preflight; docs/preflight.md documents the JSON.
type PreflightReport struct {
	GeneratedAt time.Time            `json:"generated_at"`
	Verdict     string               `json:"verdict"`
	Candidates  []PreflightCandidate `json:"candidates"`
	Handshakes  []PreflightHandshake `json:"handshakes"`
	Reloads     []PreflightReload    `json:"reloads"`
	Steps       []string             `json:"steps"`
	Assumptions []string             `json:"assumptions"`
	Unknowns    []string             `json:"unknowns"`
}

// PreflightCandidate is a candidate as judged: what it changes.
type PreflightCandidate struct {
	Source string `json:"source"`
	Item   string `json:"item,omitempty"`
	From   string `json:"from"`
	// Leaf is the candidate leaf; LeafChanged is false when it is the desired leaf already.
	Leaf        *CertSummary `json:"leaf,omitempty"`
	LeafChanged bool         `json:"leaf_changed"`
	// Bundle is the candidate CA bundle; BundleChanged is false when it holds the desired CAs.
	Bundle        []CertSummary `json:"bundle,omitempty"`
	BundleChanged bool          `json:"bundle_changed"`
}

// CertSummary names a certificate in a preflight report (never key material).
type CertSummary struct {
	Subject           string    `json:"subject"`
	Issuer            string    `json:"issuer"`
	Serial            string    `json:"serial"`
	FingerprintSHA256 string    `json:"fingerprint_sha256"`
	NotAfter          time.Time `json:"not_after"`
}

func summarizeCert(c *x509.Certificate) CertSummary {
	return CertSummary{Subject: certNameOf(c), Issuer: c.Issuer.CommonName, Serial: pki.SerialHex(c.SerialNumber),
		FingerprintSHA256: pki.Fingerprint(c), NotAfter: c.NotAfter.UTC()}
}

// PreflightHandshake is one handshake judged: who verifies which leaf with which trust, in which
// phase of the rotation.
type PreflightHandshake struct {
	Pairing string `json:"pairing"`
	Phase   string `json:"phase"`
	// Verifier is the Envoy ("namespace/pod" or its configured name) or the peer that verifies;
	// VerifierTrust where the trust it is judged with comes from.
	Verifier      string `json:"verifier"`
	VerifierTrust string `json:"verifier_trust"`
	BundleSource  string `json:"bundle_source"`
	// Presenter presents the leaf; PresenterLeaf says which (serves, has loaded, candidate, or
	// the desired leaf, assumed).
	Presenter     string      `json:"presenter"`
	PresenterLeaf string      `json:"presenter_leaf"`
	LeafSource    string      `json:"leaf_source"`
	Leaf          CertSummary `json:"leaf"`
	Result        string      `json:"result"`
	Reason        string      `json:"reason,omitempty"`
	Message       string      `json:"message"`
}

// PreflightReload says how a candidate reaches one Envoy.
type PreflightReload struct {
	Envoy    string `json:"envoy"`
	Workload string `json:"workload,omitempty"`
	Source   string `json:"source"`
	Item     string `json:"item,omitempty"`
	// What is "leaf" or "bundle".
	What string `json:"what"`
	Mode string `json:"mode"`
	Why  string `json:"why"`
}

// PreflightInputError is a candidate that cannot be judged as given (exit 2).
type PreflightInputError struct {
	Source string
	From   string
	Msg    string
}

func (e *PreflightInputError) Error() string {
	return fmt.Sprintf("candidate for %s (%s): %s", e.Source, e.From, e.Msg)
}

type pfCand struct {
	c                       desired.Candidate
	d                       *desiredCert
	leafChanged, bundleChng bool
}

type preflight struct {
	a       *auditor
	rep     Report
	now     time.Time
	opt     PreflightOptions
	cands   []*pfCand
	byRef   map[[2]string]*pfCand
	out     *PreflightReport
	assumed map[string]bool
}

// Preflight judges candidates against in (see the comment at the top of this file).
func Preflight(in Inputs, cands []desired.Candidate, policy config.Policy, now time.Time, opt PreflightOptions) (PreflightReport, error) {
	a, rep := run(in, policy, now)
	out := &PreflightReport{GeneratedAt: now, Candidates: []PreflightCandidate{}, Handshakes: []PreflightHandshake{},
		Reloads: []PreflightReload{}, Steps: []string{}, Assumptions: []string{}, Unknowns: []string{}}
	p := &preflight{a: a, rep: rep, now: now, opt: opt, byRef: map[[2]string]*pfCand{}, out: out, assumed: map[string]bool{}}
	if p.opt.AuditCommand == "" {
		p.opt.AuditCommand = "certdrift audit"
	}
	if len(cands) == 0 {
		return *out, &PreflightInputError{Msg: "no candidate given (--leaf, --bundle or --secret)"}
	}
	for _, c := range cands {
		d := a.desired.lookup(c.Source, c.Item)
		if d == nil && c.Item == "" {
			// One item of a merged source, named as audit prints it: "source/item".
			if i := strings.LastIndexByte(c.Source, '/'); i > 0 {
				if d = a.desired.lookup(c.Source[:i], c.Source[i+1:]); d != nil {
					c.Source, c.Item = c.Source[:i], c.Source[i+1:]
				}
			}
		}
		switch {
		case d == nil:
			return *out, &PreflightInputError{Source: refName(c.Source, c.Item), From: c.From,
				Msg: "no desired source of that name; name it as audit does (" + knownSources(a.desired) + ")"}
		case len(c.Chain) == 0 && len(c.Bundle) == 0:
			return *out, &PreflightInputError{Source: refName(c.Source, c.Item), From: c.From, Msg: "holds neither a leaf nor a CA bundle"}
		case p.byRef[[2]string{c.Source, c.Item}] != nil:
			return *out, &PreflightInputError{Source: refName(c.Source, c.Item), From: c.From, Msg: "given twice"}
		}
		pc := &pfCand{c: c, d: d}
		pc.leafChanged = len(c.Chain) > 0 && (!d.hasLeaf() || d.fingerprint() != pki.Fingerprint(c.Chain[0]))
		pc.bundleChng = len(c.Bundle) > 0 && !sameFingerprints(c.Bundle, d.x().CA)
		p.cands = append(p.cands, pc)
		p.byRef[[2]string{c.Source, c.Item}] = pc
		sc := PreflightCandidate{Source: c.Source, Item: c.Item, From: c.From, LeafChanged: pc.leafChanged, BundleChanged: pc.bundleChng}
		if len(c.Chain) > 0 {
			l := summarizeCert(c.Chain[0])
			sc.Leaf = &l
		}
		for _, ca := range c.Bundle {
			sc.Bundle = append(sc.Bundle, summarizeCert(ca))
		}
		out.Candidates = append(out.Candidates, sc)
	}
	p.unreachable()
	p.pairings()
	p.sni()
	p.ownPair()
	p.reloads()
	p.steps()
	out.Verdict = PreflightSafe
	if len(out.Unknowns) > 0 {
		out.Verdict = PreflightUnknown
	}
	for _, h := range out.Handshakes {
		switch h.Result {
		case HandshakeRejects:
			out.Verdict = PreflightBreaks
		case HandshakeUnknown:
			if out.Verdict == PreflightSafe {
				out.Verdict = PreflightUnknown
			}
		}
	}
	return *out, nil
}

func knownSources(ix *desiredIndex) string {
	var names []string
	for _, d := range ix.all {
		names = append(names, refName(d.source, d.item))
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) > 8 {
		return "known: " + strings.Join(names[:8], ", ") + fmt.Sprintf(" and %d more", len(names)-8)
	}
	if len(names) == 0 {
		return "none is known"
	}
	return "known: " + strings.Join(names, ", ")
}

func (p *preflight) cand(r config.Ref) *pfCand { return p.byRef[[2]string{r.Source, r.Item}] }

// adminDown reports whether nothing of an Envoy's loaded view could be read.
func adminDown(ev *EnvoyView) bool {
	return ev.Admin != nil && ev.Admin.CertsErr != nil && ev.Admin.ConfigErr != nil
}

func boundTo(ev *EnvoyView, source, item string) bool {
	return slices.ContainsFunc(ev.Config.Bindings, func(b config.Binding) bool { return b.Source == source && b.Item == item })
}

// unreachable records the Envoys whose admin did not answer and that may load a candidate: one
// bound to a candidate's source, or one with no explicit binding at all (its bindings come from
// its admin, which did not answer).
func (p *preflight) unreachable() {
	for i := range p.a.envoys {
		ev := &p.a.envoys[i]
		if !adminDown(ev) {
			continue
		}
		involved := len(ev.Config.Bindings) == 0
		for _, c := range p.cands {
			involved = involved || boundTo(ev, c.c.Source, c.c.Item)
		}
		if involved {
			p.out.Unknowns = append(p.out.Unknowns, fmt.Sprintf("Envoy %s: its admin did not answer, so what it loads and trusts of the candidates' sources cannot be told", ev.Config.Name))
		}
	}
}

// pfTrust is one verifier of a bundle source with the trust it holds now.
type pfTrust struct {
	who, where, secret string
	ev                 *EnvoyView
	cas                []*x509.Certificate
	unknown            string
}

// pfLeaf is one presenter of a leaf source with the leaf it presents now.
type pfLeaf struct {
	who, view string
	ev        *EnvoyView
	cert      *x509.Certificate
	inter     []*x509.Certificate
	unknown   string
}

// assumeOutside notes once per source that a peer certdrift cannot read is taken to hold the
// source as it is now.
func (p *preflight) assumeOutside(source, role string) {
	if p.assumed[source+role] {
		return
	}
	p.assumed[source+role] = true
	p.out.Assumptions = append(p.out.Assumptions, fmt.Sprintf("no Envoy certdrift reads %s %s: its %s is taken to be the one %s holds now, and the candidate once its files change (a control plane such as Envoy Gateway's is not an Envoy and has no admin; Envoy Gateway's reads its files on every handshake, test/scenarios/eg-ca-rotation)",
		pick(role == "bundle", "verifies with the bundle of", "presents the leaf of"), source, pick(role == "bundle", "trust", "leaf"), source))
}

// noAdminView judges a pod bound to a source that has no admin (a component such as Envoy
// Gateway's rate limit): it holds the source as it is now if it started after the source last
// changed; otherwise, and not reloading, what it holds cannot be told.
func (p *preflight) noAdminView(ev *EnvoyView, d *desiredCert) (assumed bool, why string) {
	if ev.Pod == nil {
		return false, "it has no admin endpoint to read"
	}
	if !d.changedAt.IsZero() && !ev.Pod.StartedAt.IsZero() && ev.Pod.StartedAt.Before(d.changedAt) && ev.Pod.NoHotReload {
		return false, fmt.Sprintf("it has no admin, does not reload, and started before %s last changed", d.name())
	}
	return true, ""
}

func (p *preflight) verifiers(r config.Ref) []pfTrust {
	d := p.a.desired.lookup(r.Source, r.Item)
	var out []pfTrust
	for i := range p.a.envoys {
		ev := &p.a.envoys[i]
		if t, ok := p.a.loadedTrust(ev, r.Source, r.Item); ok {
			out = append(out, pfTrust{who: ev.Config.Name, ev: ev, where: "loaded, " + t.where, secret: t.secret, cas: t.cas})
			continue
		}
		if !boundTo(ev, r.Source, r.Item) {
			continue
		}
		switch {
		case adminDown(ev):
			out = append(out, pfTrust{who: ev.Config.Name, ev: ev, unknown: "its admin did not answer"})
		case ev.Admin != nil && ev.Admin.ConfigErr != nil:
			// Trust bundles are read from config_dump: without it, whether this Envoy verifies
			// with the source cannot be told.
			out = append(out, pfTrust{who: ev.Config.Name, ev: ev, unknown: "its admin's /config_dump could not be read"})
		case ev.Admin == nil && d != nil:
			if ok, why := p.noAdminView(ev, d); ok && len(d.x().CA) > 0 {
				out = append(out, pfTrust{who: ev.Config.Name, ev: ev, where: "assumed: the bundle " + d.name() + " holds now, no admin to read", cas: d.x().CA})
			} else if !ok {
				out = append(out, pfTrust{who: ev.Config.Name, ev: ev, unknown: why})
			}
		}
	}
	if len(out) == 0 && d != nil && len(d.x().CA) > 0 {
		p.assumeOutside(d.name(), "bundle")
		out = append(out, pfTrust{who: "the peer verifying with " + d.name() + " (not an Envoy certdrift reads)", where: "assumed: the bundle " + d.name() + " holds now", cas: d.x().CA})
	}
	return out
}

func (p *preflight) presenters(r config.Ref) []pfLeaf {
	d := p.a.desired.lookup(r.Source, r.Item)
	var out []pfLeaf
	for i := range p.a.envoys {
		ev := &p.a.envoys[i]
		seen := map[string]bool{}
		ls := p.a.presentedLeaves(ev, r.Source, r.Item, p.a.served)
		for _, l := range ls {
			if fp := pki.Fingerprint(l.cert); !seen[fp] {
				seen[fp] = true
				out = append(out, pfLeaf{who: ev.Config.Name, ev: ev, view: l.view + " now", cert: l.cert, inter: l.intermediates})
			}
		}
		if len(ls) > 0 || !boundTo(ev, r.Source, r.Item) {
			continue
		}
		switch {
		case adminDown(ev):
			out = append(out, pfLeaf{who: ev.Config.Name, ev: ev, unknown: "its admin did not answer"})
		case ev.Admin != nil && ev.Admin.ConfigErr != nil:
			out = append(out, pfLeaf{who: ev.Config.Name, ev: ev, unknown: "its admin's /config_dump could not be read"})
		case ev.Admin == nil && d != nil && d.leafX() != nil:
			if ok, why := p.noAdminView(ev, d); ok {
				out = append(out, pfLeaf{who: ev.Config.Name, ev: ev, view: "presents now (assumed: the leaf " + d.name() + " holds, no admin to read)", cert: d.leafX(), inter: d.x().Chain[1:]})
			} else {
				out = append(out, pfLeaf{who: ev.Config.Name, ev: ev, unknown: why})
			}
		}
	}
	if len(out) == 0 && d != nil && d.leafX() != nil {
		p.assumeOutside(d.name(), "leaf")
		out = append(out, pfLeaf{who: "the peer presenting " + d.name() + " (not an Envoy certdrift reads)", view: "presents now (assumed: the leaf " + d.name() + " holds)", cert: d.leafX(), inter: d.x().Chain[1:]})
	}
	return out
}

func presenterNames(ls []pfLeaf) string {
	var names []string
	for _, l := range ls {
		if !slices.Contains(names, l.who) {
			names = append(names, l.who)
		}
	}
	if len(names) == 0 {
		return "its holder"
	}
	return strings.Join(names, ", ")
}

func (p *preflight) judge(h PreflightHandshake, leaf *x509.Certificate, inter, cas []*x509.Certificate) {
	h.Leaf = summarizeCert(leaf)
	res := pki.Verify(leaf, inter, cas, p.now, x509.ExtKeyUsageAny)
	h.Result = HandshakeAccepts
	verb := "accepts"
	if !res.OK {
		h.Result, verb = HandshakeRejects, "rejects"
		if res.Err != nil {
			h.Reason = res.Err.Error()
		}
	}
	h.Message = fmt.Sprintf("%s (trust: %s) %s the leaf %s (issuer %q) that %s %s", h.Verifier, h.VerifierTrust, verb, short(h.Leaf.FingerprintSHA256), leaf.Issuer.CommonName, h.Presenter, h.PresenterLeaf)
	p.out.Handshakes = append(p.out.Handshakes, h)
}

func (p *preflight) unknownHandshake(h PreflightHandshake, why string) {
	h.Result, h.Reason = HandshakeUnknown, why
	h.Message = fmt.Sprintf("%s / %s: cannot tell: %s", h.Verifier, h.Presenter, why)
	p.out.Handshakes = append(p.out.Handshakes, h)
}

// pairings judges every declared pairing whose bundle or leaf a candidate changes.
func (p *preflight) pairings() {
	for _, pr := range p.a.cfg.Pairings {
		bc, lc := p.cand(pr.Bundle), p.cand(pr.Leaf)
		newBundle, newLeaf := bc != nil && bc.bundleChng, lc != nil && lc.leafChanged
		if !newBundle && !newLeaf {
			continue
		}
		base := PreflightHandshake{Pairing: pairName(pr), BundleSource: refName(pr.Bundle.Source, pr.Bundle.Item), LeafSource: refName(pr.Leaf.Source, pr.Leaf.Item)}
		verifiers, presenters := p.verifiers(pr.Bundle), p.presenters(pr.Leaf)
		if newLeaf {
			leaf, inter := lc.c.Chain[0], lc.c.Chain[1:]
			for _, v := range verifiers {
				h := base
				h.Phase, h.Verifier, h.Presenter = PhaseNewLeafCurrentTrust, v.who, presenterNames(presenters)
				h.PresenterLeaf = "will present from " + lc.c.From
				if v.unknown != "" {
					p.unknownHandshake(h, v.unknown)
					continue
				}
				h.VerifierTrust = v.where
				p.judge(h, leaf, inter, v.cas)
			}
			if newBundle {
				h := base
				h.Phase, h.Verifier, h.Presenter = PhaseNewLeafNewBundle, "every verifier of "+base.BundleSource+" once it loaded the candidate bundle", presenterNames(presenters)
				h.VerifierTrust, h.PresenterLeaf = "candidate bundle from "+bc.c.From, "will present from "+lc.c.From
				p.judge(h, leaf, inter, bc.c.Bundle)
			}
		}
		if newBundle {
			for _, v := range verifiers {
				for _, l := range presenters {
					h := base
					h.Phase, h.Verifier, h.Presenter = PhaseCurrentLeafNewBundle, v.who, l.who
					h.VerifierTrust = "candidate bundle from " + bc.c.From
					if l.unknown != "" {
						p.unknownHandshake(h, l.unknown)
						continue
					}
					h.PresenterLeaf = l.view
					p.judge(h, l.cert, l.inter, bc.c.Bundle)
				}
			}
		}
	}
	for _, c := range p.cands {
		named := slices.ContainsFunc(p.a.cfg.Pairings, func(pr config.Pairing) bool {
			return (pr.Bundle.Source == c.c.Source && pr.Bundle.Item == c.c.Item) || (pr.Leaf.Source == c.c.Source && pr.Leaf.Item == c.c.Item)
		})
		if !named && (c.leafChanged || c.bundleChng) {
			p.out.Assumptions = append(p.out.Assumptions, fmt.Sprintf("no pairing names %s: who verifies its leaf or is verified by its bundle is not known beyond the SNIs it is served under (declare pairings, docs/preflight.md)", c.d.name()))
		}
	}
}

// sni judges each new leaf against the SNIs its source is served under now.
func (p *preflight) sni() {
	for _, c := range p.cands {
		if !c.leafChanged {
			continue
		}
		leaf := c.c.Chain[0]
		seen := map[string]bool{}
		for _, b := range p.rep.Bindings {
			if b.Trust || b.Source != c.c.Source || b.Item != c.c.Item {
				continue
			}
			for _, sni := range b.SNIs {
				if seen[b.Envoy+"|"+sni] {
					continue
				}
				seen[b.Envoy+"|"+sni] = true
				h := PreflightHandshake{Phase: PhaseNewLeafSNI, Verifier: fmt.Sprintf("clients of %s asking for SNI %s", b.Envoy, sni),
					VerifierTrust: "the name they ask for", Presenter: b.Envoy, PresenterLeaf: "will serve from " + c.c.From,
					LeafSource: c.d.name(), Leaf: summarizeCert(leaf), Result: HandshakeAccepts}
				if !pki.CoversHost(leaf, sni) {
					h.Result, h.Reason = HandshakeRejects, "the leaf does not cover "+sni
				}
				h.Message = fmt.Sprintf("%s %s the new leaf %s (%s)", h.Verifier, pick(h.Result == HandshakeAccepts, "accept", "reject"), short(h.Leaf.FingerprintSHA256), pick(h.Result == HandshakeAccepts, "it covers "+sni, h.Reason))
				p.out.Handshakes = append(p.out.Handshakes, h)
			}
		}
	}
}

// ownPair judges each new leaf with what is written beside it: the private key given with it, and
// the source's own CA bundle. Both are what audit judges of the source once it is written, and a
// key that does not match is a pair every Envoy refuses, so each is a handshake that would fail.
func (p *preflight) ownPair() {
	for _, c := range p.cands {
		if !c.leafChanged {
			continue
		}
		leaf, inter := c.c.Chain[0], c.c.Chain[1:]
		base := PreflightHandshake{Presenter: presenterNames(p.presenters(config.Ref{Source: c.c.Source, Item: c.c.Item})),
			PresenterLeaf: "will present from " + c.c.From, LeafSource: c.d.name(), BundleSource: c.d.name(), Leaf: summarizeCert(leaf)}
		if c.c.Key != nil || c.c.KeyErr != nil {
			h := base
			h.Phase, h.Verifier, h.VerifierTrust, h.Result = PhaseNewLeafOwnKey, "an Envoy loading "+c.d.name(), "the private key from "+c.c.From, HandshakeAccepts
			switch {
			case c.c.KeyErr != nil:
				h.Result, h.Reason = HandshakeRejects, c.c.KeyErr.Error()
			case !pki.KeyMatches(leaf, c.c.Key.Public):
				h.Result, h.Reason = HandshakeRejects, fmt.Sprintf("the %s private key does not match the new leaf's public key", c.c.Key.Algorithm)
			}
			h.Message = fmt.Sprintf("%s %s the new leaf %s with the private key beside it (%s)", h.Verifier,
				pick(h.Result == HandshakeAccepts, "takes", "refuses"), short(h.Leaf.FingerprintSHA256), pick(h.Result == HandshakeAccepts, "they match", h.Reason))
			p.out.Handshakes = append(p.out.Handshakes, h)
		}
		bundle, from := c.c.Bundle, "candidate bundle from "+c.c.From
		if len(bundle) == 0 {
			bundle, from = c.d.x().CA, "the CA bundle "+c.d.name()+" holds now"
		}
		if len(bundle) > 0 {
			h := base
			h.Phase, h.Verifier, h.VerifierTrust = PhaseNewLeafOwnBundle, "audit of "+c.d.name()+" once written (its own CA bundle)", from
			p.judge(h, leaf, inter, bundle)
		}
	}
}

// reloads says, for each Envoy bound to a changed part of a candidate, how it will load it.
func (p *preflight) reloads() {
	seen := map[string]bool{}
	add := func(ev *EnvoyView, c *pfCand, what, mode, why string) {
		k := ev.Config.Name + "|" + c.c.Source + "|" + c.c.Item + "|" + what
		if seen[k] {
			return
		}
		seen[k] = true
		r := PreflightReload{Envoy: ev.Config.Name, Source: c.c.Source, Item: c.c.Item, What: what, Mode: mode, Why: why}
		if ev.Pod != nil {
			r.Workload = ev.Pod.Workload
		}
		p.out.Reloads = append(p.out.Reloads, r)
	}
	byName := map[string]*EnvoyView{}
	for i := range p.a.envoys {
		byName[p.a.envoys[i].Config.Name] = &p.a.envoys[i]
	}
	for _, b := range p.rep.Bindings {
		c := p.byRef[[2]string{b.Source, b.Item}]
		ev := byName[b.Envoy]
		if c == nil || ev == nil || (b.Trust && !c.bundleChng) || (!b.Trust && !c.leafChanged) {
			continue
		}
		mode, why := p.reloadMode(ev, c.d, b.Secret, b.File, b.State, b.Trust)
		add(ev, c, pick(b.Trust, "bundle", "leaf"), mode, why)
	}
	// Verifiers found through their loaded trust without a trust binding, and pods that mount a
	// changed source but have no binding for that part (a bundle beside a leaf they serve).
	for _, c := range p.cands {
		if c.bundleChng {
			for _, v := range p.verifiers(config.Ref{Source: c.c.Source, Item: c.c.Item}) {
				if v.ev != nil {
					mode, why := p.reloadMode(v.ev, c.d, v.secret, "", "", true)
					if v.unknown != "" && mode != ReloadRestart {
						mode, why = ReloadUnknown, v.unknown
					}
					add(v.ev, c, "bundle", mode, why)
				}
			}
		}
		for i := range p.a.envoys {
			ev := &p.a.envoys[i]
			if ev.Pod == nil || !boundTo(ev, c.c.Source, c.c.Item) {
				continue
			}
			for _, what := range []string{"leaf", "bundle"} {
				if (what == "leaf" && !c.leafChanged) || (what == "bundle" && !c.bundleChng) {
					continue
				}
				if mode, why := p.podReload(ev, c.d); mode != "" {
					add(ev, c, what, mode, why)
				}
			}
		}
	}
	slices.SortStableFunc(p.out.Reloads, func(x, y PreflightReload) int {
		return cmp.Or(cmp.Compare(x.Envoy, y.Envoy), cmp.Compare(x.Source, y.Source), cmp.Compare(x.What, y.What))
	})
}

// podReload is what the pod alone says: a component that never reloads, or a subPath mount.
func (p *preflight) podReload(ev *EnvoyView, d *desiredCert) (string, string) {
	if ev.Pod == nil {
		return "", ""
	}
	if ev.Pod.NoHotReload {
		return ReloadRestart, "it does not reload certificates (annotation " + AnnotationHotReload + `: "false", or a component known not to, such as Envoy Gateway's rate limit)`
	}
	for _, r := range ev.Pod.Risks {
		if r.Source == d.source {
			return ReloadRestart, fmt.Sprintf("container %s mounts %s with subPath at %s: the file is never updated", r.Container, d.source, r.MountPath)
		}
	}
	return "", ""
}

// reloadMode says how an Envoy will load a changed source it is bound to: from what the pod says
// (podReload), from the binding's state now (a stale binding did not load the last change
// either), and from where its admin says it holds the certificate or bundle.
func (p *preflight) reloadMode(ev *EnvoyView, d *desiredCert, secret, file, state string, trust bool) (string, string) {
	if mode, why := p.podReload(ev, d); mode != "" {
		return mode, why
	}
	if state == StateStale {
		return ReloadRestart, fmt.Sprintf("it has not loaded the current %s of %s either (stale now: see certdrift audit)", pick(trust, "bundle", "leaf"), d.name())
	}
	if ev.Admin == nil {
		return ReloadUnknown, "no admin endpoint to read how it loads " + d.name()
	}
	if secret != "" {
		for _, s := range ev.Admin.Secrets {
			if s.Name != secret {
				continue
			}
			if s.State == envoystate.SecretStatic {
				return ReloadRestart, fmt.Sprintf("static secret %q: Envoy reads its files once, at start", secret)
			}
			dir := cmp.Or(pick(trust, s.CAWatchedDir, s.WatchedDir), s.WatchedDir)
			if dir != "" {
				return ReloadSelf, fmt.Sprintf("SDS secret %q, file-based, watching %s", secret, dir)
			}
			return ReloadSelf, fmt.Sprintf("SDS secret %q: Envoy loads what its SDS source delivers", secret)
		}
		return ReloadUnknown, fmt.Sprintf("its admin does not show the secret %q it is bound through", secret)
	}
	if file != "" {
		// A binding by mount names the file, not the secret: an SDS secret reading that file,
		// watching its directory, or holding the desired leaf's names (an upstream context, which
		// no listener ties to the mount) is what the Envoy loads it through.
		if s, ok := sdsSecretFor(ev.Admin, file, d, trust); ok {
			return p.reloadMode(ev, d, s, "", state, trust)
		}
		return ReloadRestart, fmt.Sprintf("a static TLS context reading %s: Envoy reads it once, at start", file)
	}
	return ReloadUnknown, "its admin does not say where it reads " + d.name() + " from"
}

// sdsSecretFor finds the SDS secret through which an Envoy loads file: the secret that names it,
// else one watching its directory, else (a leaf) one holding a certificate with the desired
// leaf's names.
func sdsSecretFor(snap *envoystate.Snapshot, file string, d *desiredCert, trust bool) (string, bool) {
	dir := filepath.Dir(filepath.Clean(file))
	for _, rule := range []func(s envoystate.Secret) bool{
		func(s envoystate.Secret) bool {
			return filepath.Clean(pick(trust, s.CAFile, s.CertFile)) == filepath.Clean(file)
		},
		func(s envoystate.Secret) bool {
			w := pick(trust, cmp.Or(s.CAWatchedDir, s.WatchedDir), s.WatchedDir)
			return w != "" && filepath.Clean(w) == dir
		},
		func(s envoystate.Secret) bool {
			return !trust && d.leafX() != nil && len(s.Chain) > 0 && s.Chain[0] != nil &&
				pki.SameNames(s.Chain[0].DNSNames, d.lf.DNSNames) && pki.SameNames(uriStrings(s.Chain[0]), d.lf.URIs)
		},
	} {
		for _, s := range snap.Secrets {
			if s.State == envoystate.SecretStatic || (trust && !s.HasValidation) || (!trust && !s.HasCertificate) {
				continue
			}
			if rule(s) {
				return s.Name, true
			}
		}
	}
	return "", false
}

// steps prints the safe order: bundle [new, old] first, every verifier converged, then the leaf,
// the old CA dropped last; restarts where the Envoys that need them must load the change.
func (p *preflight) steps() {
	var st []string
	add := func(s string) { st = append(st, s) }
	restarts := func(what string, sources map[string]bool) {
		var names []string
		for _, r := range p.out.Reloads {
			if r.What == what && sources[refName(r.Source, r.Item)] && r.Mode != ReloadSelf {
				n := r.Envoy
				if r.Workload != "" {
					n += " (" + r.Workload + ")"
				}
				n += fmt.Sprintf(" so that it loads the new %s (%s%s)", what, pick(r.Mode == ReloadUnknown, "if it does not by itself: ", ""), r.Why)
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
		for _, n := range names {
			add("Restart " + n + ".")
		}
	}
	// Bundles that must hold the new CA before any new leaf is presented: the candidates' own,
	// and those of verifiers whose current trust rejects a new leaf.
	bundles := map[string]bool{}
	rejectedOld := map[string]bool{} // a candidate bundle that drops a CA a current leaf needs
	for _, c := range p.cands {
		if c.bundleChng {
			bundles[c.d.name()] = true
		}
	}
	newLeafRejected := false
	for _, h := range p.out.Handshakes {
		switch {
		case h.Phase == PhaseNewLeafCurrentTrust && h.Result == HandshakeRejects:
			bundles[h.BundleSource] = true
			newLeafRejected = true
		case h.Phase == PhaseCurrentLeafNewBundle && h.Result == HandshakeRejects:
			rejectedOld[h.BundleSource] = true
		}
	}
	leaves := map[string]bool{}
	var newIssuers []string
	for _, c := range p.cands {
		if c.leafChanged {
			leaves[c.d.name()] = true
			if iss := c.c.Chain[0].Issuer.CommonName; !slices.Contains(newIssuers, iss) {
				newIssuers = append(newIssuers, iss)
			}
		}
	}
	keptOld := false
	if len(bundles) > 0 {
		for _, b := range sortedKeys(bundles) {
			c := p.byRef[refKey(b)]
			switch {
			case c != nil && c.bundleChng && !rejectedOld[b] && !newLeafRejectedFor(p.out.Handshakes, b) && keepsCAs(c.c.Bundle, c.d.x().CA):
				add(fmt.Sprintf("Write the candidate CA bundle of %s (%s); leave its leaf as it is.", b, c.c.From))
				keptOld = keptOld || len(c.c.Bundle) > 1
			default:
				newCAs := "the new CA (issuer of the new leaves: " + strings.Join(newIssuers, ", ") + ")"
				if c != nil && c.bundleChng {
					newCAs = "the CAs of the candidate bundle (" + c.c.From + ")"
				}
				add(fmt.Sprintf("Write the CA bundle of %s as [new, old]: %s first, then the CAs it holds now; leave its leaf as it is.", b, newCAs))
				keptOld = true
			}
		}
		restarts("bundle", bundles)
		add(fmt.Sprintf("Wait until every verifier has loaded the new bundle: run `%s` until every trust binding of %s is converged (no STALE_TRUST, STALE_PROCESS or CA_BUNDLE_GAP; Kubernetes projects a Secret into pods within about a minute).", p.opt.AuditCommand, strings.Join(sortedKeys(bundles), ", ")))
	}
	if len(leaves) > 0 {
		if newLeafRejected || len(bundles) > 0 {
			add(fmt.Sprintf("Then write the new leaf of %s (preflight it again first: with the bundles converged it should report no rejection).", strings.Join(sortedKeys(leaves), ", ")))
		} else {
			add(fmt.Sprintf("Write the new leaf of %s.", strings.Join(sortedKeys(leaves), ", ")))
		}
		restarts("leaf", leaves)
		add(fmt.Sprintf("Wait until every Envoy serves it: run `%s` until the bindings of %s are converged (no STALE_LOADED, STALE_SERVED or STALE_PROCESS).", p.opt.AuditCommand, strings.Join(sortedKeys(leaves), ", ")))
	} else if len(bundles) > 0 {
		add("Then rotate the leaves to the new CA, preflighting them against the converged bundles.")
	}
	if keptOld {
		add(fmt.Sprintf("Drop the old CA last: once every peer presents a leaf of the new CA (`%s` clean), write the bundles of %s with the new CA only, restarting the same Envoys as above.", p.opt.AuditCommand, strings.Join(sortedKeys(bundles), ", ")))
	}
	for i := range st {
		st[i] = fmt.Sprintf("%d. %s", i+1, st[i])
	}
	p.out.Steps = st
}

// keepsCAs reports whether a candidate bundle still holds every CA of the bundle in use: one that
// drops a CA can reject a peer no pairing names, so the safe order keeps it until the leaves moved.
func keepsCAs(candidate, current []*x509.Certificate) bool {
	have := fingerprints(candidate)
	for _, fp := range fingerprints(current) {
		if !slices.Contains(have, fp) {
			return false
		}
	}
	return true
}

func newLeafRejectedFor(hs []PreflightHandshake, bundle string) bool {
	return slices.ContainsFunc(hs, func(h PreflightHandshake) bool {
		return h.BundleSource == bundle && (h.Phase == PhaseNewLeafCurrentTrust || h.Phase == PhaseNewLeafNewBundle) && h.Result == HandshakeRejects
	})
}

func refKey(name string) [2]string { return [2]string{name, ""} }

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
