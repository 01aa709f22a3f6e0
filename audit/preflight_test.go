package audit

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/test/certs"
)

// pfWorld is Envoy Gateway's shape: a proxy pod (admin, file-based SDS for its xDS client leaf
// and trust), a rate limit pod (no admin, never reloads) and a control plane that is not an
// Envoy (only its Secret is seen).
type pfWorld struct {
	caOld, caNew                     *certs.Authority
	proxyOld, proxyNew, cpOld, cpNew *certs.Leaf
	rlOld, rlNew                     *certs.Leaf
}

func newPFWorld(t *testing.T) *pfWorld {
	caOld := certs.NewCA(t, certs.WithCommonName("ca-old"), certs.WithValidity(now.Add(-48*time.Hour), now.Add(3650*24*time.Hour)))
	caNew := certs.NewCA(t, certs.WithCommonName("ca-new"), certs.WithValidity(now.Add(-48*time.Hour), now.Add(3650*24*time.Hour)))
	valid := certs.WithValidity(now.Add(-24*time.Hour), now.Add(90*24*time.Hour))
	leaf := func(ca *certs.Authority, name string) *certs.Leaf {
		return ca.Leaf(t, certs.WithCommonName(name), certs.WithDNSNames(name+".eg.svc"), certs.WithClientAuth(), certs.WithFreshKey(), valid)
	}
	return &pfWorld{caOld: caOld, caNew: caNew, proxyOld: leaf(caOld, "envoy"), proxyNew: leaf(caNew, "envoy"),
		cpOld: leaf(caOld, "envoy-gateway"), cpNew: leaf(caNew, "envoy-gateway"), rlOld: leaf(caOld, "envoy-rate-limit"), rlNew: leaf(caNew, "envoy-rate-limit")}
}

// proxy is the proxy pod holding leaf l and trusting trust, both file-based SDS watching /certs.
func (w *pfWorld) proxy(l *certs.Leaf, trust ...*x509.Certificate) EnvoyView {
	snap := &envoystate.Snapshot{AdminURL: "http://proxy:19000", Secrets: []envoystate.Secret{
		{Name: "xds_certificate", State: envoystate.SecretActive, HasCertificate: true, WatchedDir: "/certs", Chain: l.Chain()},
		{Name: "xds_trusted_ca", State: envoystate.SecretActive, HasValidation: true, WatchedDir: "/certs", ValidationCA: trust},
	}}
	return pod("eg", "envoy-1", "Deployment/envoy", now.Add(-time.Hour), snap, []config.Binding{{Source: "eg/envoy", Secret: "xds_certificate"}})
}

func (w *pfWorld) rateLimit() EnvoyView {
	return noHotReload(pod("eg", "ratelimit-1", "Deployment/envoy-ratelimit", now.Add(-time.Hour), nil, []config.Binding{{Source: "eg/envoy-rate-limit", File: "/certs/tls.crt"}}))
}

// desired is the three Secrets, changed two hours ago, each with bundle.
func (w *pfWorld) desired(bundle ...*x509.Certificate) []desired.Observation {
	at := now.Add(-2 * time.Hour)
	return []desired.Observation{kubeDesired("eg/envoy", w.proxyOld, at, bundle...), kubeDesired("eg/envoy-gateway", w.cpOld, at, bundle...),
		kubeDesired("eg/envoy-rate-limit", w.rlOld, at, bundle...)}
}

var pfPairings = []config.Pairing{
	{Name: "xds", Bundle: config.Ref{Source: "eg/envoy"}, Leaf: config.Ref{Source: "eg/envoy-gateway"}},
	{Name: "xds (reverse)", Bundle: config.Ref{Source: "eg/envoy-gateway"}, Leaf: config.Ref{Source: "eg/envoy"}},
}

func cand(source string, l *certs.Leaf, bundle ...*x509.Certificate) desired.Candidate {
	c := desired.Candidate{Source: source, From: source + ".yaml", Bundle: bundle}
	if l != nil {
		c.Chain = l.Chain()
	}
	return c
}

// withKey gives c the public half of l's key (nil l: keyErr instead), as a Secret manifest's
// tls.key reaches preflight.
func withKey(t *testing.T, c desired.Candidate, l *certs.Leaf, keyErr error) desired.Candidate {
	t.Helper()
	if l != nil {
		info, err := pki.ParsePrivateKey(l.KeyPEM, pki.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		c.Key = &info
	}
	c.KeyErr = keyErr
	return c
}

// verdictLines are the judged handshakes as "result phase verifier <- presenter", sorted.
func verdictLines(r PreflightReport) []string {
	var out []string
	for _, h := range r.Handshakes {
		v, p := h.Verifier, h.Presenter
		if strings.Contains(v, "not an Envoy") {
			v = "outside"
		}
		if strings.Contains(p, "not an Envoy") {
			p = "outside"
		}
		if strings.HasPrefix(v, "every verifier") {
			v = "every"
		}
		out = append(out, h.Result+" "+h.Phase+" "+h.Pairing+" "+v+" <- "+p)
	}
	slices.Sort(out)
	return out
}

func configDumpUnread(ev EnvoyView) EnvoyView {
	ev.Admin = &envoystate.Snapshot{AdminURL: ev.Admin.AdminURL, ConfigErr: errors.New("GET /config_dump: HTTP 503")}
	return ev
}

func TestPreflight(t *testing.T) {
	w := newPFWorld(t)
	old, nw := w.caOld.Cert, w.caNew.Cert
	certgen := []desired.Candidate{cand("eg/envoy", w.proxyNew, nw), cand("eg/envoy-gateway", w.cpNew, nw)}
	bundleFirst := []desired.Candidate{cand("eg/envoy", nil, nw, old), cand("eg/envoy-gateway", nil, nw, old)}
	newLeaves := []desired.Candidate{cand("eg/envoy", w.proxyNew), cand("eg/envoy-gateway", w.cpNew)}
	down := w.proxy(w.proxyOld, old)
	down.Admin = &envoystate.Snapshot{AdminURL: down.Config.Admin, CertsErr: refused(), ConfigErr: refused(), StatsErr: refused()}
	cases := map[string]struct {
		reason      string
		desired     []desired.Observation
		envoys      []EnvoyView
		cands       []desired.Candidate
		wantVerdict string
		want        []string
	}{
		"CertgenWithoutBundle": {
			reason:  "certgen v1.9.1: new leaves and ca.crt = [new] at once: every direction fails in some window",
			desired: w.desired(old), envoys: []EnvoyView{w.proxy(w.proxyOld, old), w.rateLimit()}, cands: certgen,
			wantVerdict: PreflightBreaks,
			want: []string{
				"accepts new_leaf_new_bundle xds every <- outside",
				"accepts new_leaf_new_bundle xds (reverse) every <- eg/envoy-1",
				"rejects current_leaf_new_bundle xds eg/envoy-1 <- outside",
				"rejects current_leaf_new_bundle xds (reverse) outside <- eg/envoy-1",
				"rejects new_leaf_current_trust xds eg/envoy-1 <- outside",
				"rejects new_leaf_current_trust xds (reverse) outside <- eg/envoy-1",
				"accepts new_leaf_own_bundle  audit of eg/envoy once written (its own CA bundle) <- eg/envoy-1",
				"accepts new_leaf_own_bundle  audit of eg/envoy-gateway once written (its own CA bundle) <- outside",
			},
		},
		"BundleFirst": {
			reason:  "step 1, ca.crt = [new, old] and the leaves kept: every current leaf still verifies",
			desired: w.desired(old), envoys: []EnvoyView{w.proxy(w.proxyOld, old), w.rateLimit()}, cands: bundleFirst,
			wantVerdict: PreflightSafe,
			want: []string{
				"accepts current_leaf_new_bundle xds eg/envoy-1 <- outside",
				"accepts current_leaf_new_bundle xds (reverse) outside <- eg/envoy-1",
			},
		},
		"LeavesAfterConvergence": {
			reason:  "step 2 once the proxy loaded [new, old]: the new leaves verify with what is loaded",
			desired: w.desired(nw, old), envoys: []EnvoyView{w.proxy(w.proxyOld, nw, old)}, cands: newLeaves,
			wantVerdict: PreflightSafe,
			want: []string{
				"accepts new_leaf_current_trust xds eg/envoy-1 <- outside",
				"accepts new_leaf_current_trust xds (reverse) outside <- eg/envoy-1",
				"accepts new_leaf_own_bundle  audit of eg/envoy once written (its own CA bundle) <- eg/envoy-1",
				"accepts new_leaf_own_bundle  audit of eg/envoy-gateway once written (its own CA bundle) <- outside",
			},
		},
		"LeavesBeforeConvergence": {
			reason: "the same step 2 while the proxy still holds [old] although its Secret says [new, old]: " +
				"the loaded trust, not the desired one, is what rejects",
			desired: w.desired(nw, old), envoys: []EnvoyView{w.proxy(w.proxyOld, old)}, cands: newLeaves,
			wantVerdict: PreflightBreaks,
			want: []string{
				"accepts new_leaf_current_trust xds (reverse) outside <- eg/envoy-1",
				"rejects new_leaf_current_trust xds eg/envoy-1 <- outside",
				"accepts new_leaf_own_bundle  audit of eg/envoy once written (its own CA bundle) <- eg/envoy-1",
				"accepts new_leaf_own_bundle  audit of eg/envoy-gateway once written (its own CA bundle) <- outside",
			},
		},
		"OwnBundleGap": {
			reason: "new leaves of the new CA while the Secrets' own ca.crt is still [old]: audit would find " +
				"CA_BUNDLE_GAP on each once written, whatever the peers have loaded",
			desired: w.desired(old), envoys: []EnvoyView{w.proxy(w.proxyOld, nw, old)}, cands: newLeaves,
			wantVerdict: PreflightBreaks,
			want: []string{
				"accepts new_leaf_current_trust xds eg/envoy-1 <- outside",
				"rejects new_leaf_current_trust xds (reverse) outside <- eg/envoy-1", // the control plane holds [old]
				"rejects new_leaf_own_bundle  audit of eg/envoy once written (its own CA bundle) <- eg/envoy-1",
				"rejects new_leaf_own_bundle  audit of eg/envoy-gateway once written (its own CA bundle) <- outside",
			},
		},
		"KeyMismatch": {
			reason:  "the proxy's candidate Secret carries another leaf's key: every Envoy loading it refuses the pair",
			desired: w.desired(nw, old), envoys: []EnvoyView{w.proxy(w.proxyOld, nw, old)},
			cands:       []desired.Candidate{withKey(t, cand("eg/envoy", w.proxyNew), w.cpNew, nil), withKey(t, cand("eg/envoy-gateway", w.cpNew), w.cpNew, nil)},
			wantVerdict: PreflightBreaks,
			want: []string{
				"accepts new_leaf_current_trust xds eg/envoy-1 <- outside",
				"accepts new_leaf_current_trust xds (reverse) outside <- eg/envoy-1",
				"accepts new_leaf_own_bundle  audit of eg/envoy once written (its own CA bundle) <- eg/envoy-1",
				"accepts new_leaf_own_bundle  audit of eg/envoy-gateway once written (its own CA bundle) <- outside",
				"rejects new_leaf_own_key  an Envoy loading eg/envoy <- eg/envoy-1",
				"accepts new_leaf_own_key  an Envoy loading eg/envoy-gateway <- outside",
			},
		},
		"KeyUnreadable": {
			reason:  "a tls.key that does not parse is a pair no Envoy loads",
			desired: w.desired(nw, old), envoys: []EnvoyView{w.proxy(w.proxyOld, nw, old)},
			cands:       []desired.Candidate{withKey(t, cand("eg/envoy", w.proxyNew), nil, errors.New("no private key PEM block found"))},
			wantVerdict: PreflightBreaks,
			want: []string{
				"accepts new_leaf_current_trust xds (reverse) outside <- eg/envoy-1",
				"accepts new_leaf_own_bundle  audit of eg/envoy once written (its own CA bundle) <- eg/envoy-1",
				"rejects new_leaf_own_key  an Envoy loading eg/envoy <- eg/envoy-1",
			},
		},
		"ConfigDumpUnread": {
			reason:  "the proxy answered /certs but not /config_dump, where trust bundles are read: cannot tell",
			desired: w.desired(old), envoys: []EnvoyView{configDumpUnread(w.proxy(w.proxyOld, old))}, cands: bundleFirst,
			wantVerdict: PreflightUnknown,
			want: []string{
				"accepts current_leaf_new_bundle xds eg/envoy-1 <- outside",
				"unknown current_leaf_new_bundle xds (reverse) outside <- eg/envoy-1",
			},
		},
		"AdminDown": {
			reason:  "the proxy's admin did not answer: its trust and leaf cannot be told",
			desired: w.desired(old), envoys: []EnvoyView{down}, cands: bundleFirst,
			wantVerdict: PreflightUnknown,
			want: []string{
				"accepts current_leaf_new_bundle xds eg/envoy-1 <- outside",
				"unknown current_leaf_new_bundle xds (reverse) outside <- eg/envoy-1",
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := Inputs{Config: &config.Config{Pairings: pfPairings}, Desired: tc.desired, Envoys: tc.envoys}
			r, err := Preflight(in, tc.cands, config.DefaultPolicy, now, PreflightOptions{})
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(tc.want)
			if diff := cmp.Diff(tc.want, verdictLines(r)); diff != "" || r.Verdict != tc.wantVerdict {
				t.Errorf("%s\nverdict %s, want %s; handshakes (-want +got):\n%s", tc.reason, r.Verdict, tc.wantVerdict, diff)
			}
		})
	}
}

func TestPreflightSteps(t *testing.T) {
	w := newPFWorld(t)
	old, nw := w.caOld.Cert, w.caNew.Cert
	in := Inputs{Config: &config.Config{Pairings: pfPairings}, Desired: w.desired(old), Envoys: []EnvoyView{w.proxy(w.proxyOld, old), w.rateLimit()}}
	cands := []desired.Candidate{cand("eg/envoy", w.proxyNew, nw), cand("eg/envoy-gateway", w.cpNew, nw), cand("eg/envoy-rate-limit", w.rlNew, nw)}
	r, err := Preflight(in, cands, config.DefaultPolicy, now, PreflightOptions{AuditCommand: "certdrift audit -k"})
	if err != nil {
		t.Fatal(err)
	}
	find := func(sub string) int {
		return slices.IndexFunc(r.Steps, func(s string) bool { return strings.Contains(s, sub) })
	}
	bundle, restartRL, wait, leaf, drop := find("Write the CA bundle of eg/envoy as [new, old]"), find("Restart eg/ratelimit-1"), find("run `certdrift audit -k`"), find("Then write the new leaf"), find("Drop the old CA last")
	if bundle < 0 || restartRL < 0 || wait < 0 || leaf < 0 || drop < 0 || !(bundle < restartRL && restartRL < wait && wait < leaf && leaf < drop) {
		t.Errorf("steps out of the safe order (bundle %d, restart %d, wait %d, leaf %d, drop %d):\n%s", bundle, restartRL, wait, leaf, drop, strings.Join(r.Steps, "\n"))
	}
	// The rate limit's bundle is named by no pairing, but its candidate drops the CA in use: it
	// gets [new, old] too.
	if find("Write the CA bundle of eg/envoy-rate-limit as [new, old]") < 0 {
		t.Errorf("steps do not keep the old CA in a candidate bundle no pairing judges:\n%s", strings.Join(r.Steps, "\n"))
	}
	modes := map[string]string{}
	for _, x := range r.Reloads {
		modes[x.Envoy+" "+x.Source+" "+x.What] = x.Mode
	}
	want := map[string]string{
		"eg/envoy-1 eg/envoy bundle":                ReloadSelf,
		"eg/envoy-1 eg/envoy leaf":                  ReloadSelf,
		"eg/ratelimit-1 eg/envoy-rate-limit bundle": ReloadRestart,
		"eg/ratelimit-1 eg/envoy-rate-limit leaf":   ReloadRestart,
	}
	if diff := cmp.Diff(want, modes); diff != "" {
		t.Errorf("reload modes (-want +got):\n%s", diff)
	}
	// Control: a bundle that keeps the old CA needs no [new, old] rewrite, only its own step.
	r, _ = Preflight(in, []desired.Candidate{cand("eg/envoy", nil, nw, old)}, config.DefaultPolicy, now, PreflightOptions{})
	if find("as [new, old]") >= 0 || find("Write the candidate CA bundle of eg/envoy") < 0 {
		t.Errorf("bundle-first steps:\n%s", strings.Join(r.Steps, "\n"))
	}
}

// TestPreflightReloadModes: what an Envoy's admin and pod say about how a new leaf reaches it.
func TestPreflightReloadModes(t *testing.T) {
	f := newFixture(t)
	rotated := now.Add(-time.Hour)
	d := []desired.Observation{kubeDesired("shop/web", f.cur, rotated)}
	sds := &envoystate.Snapshot{AdminURL: "http://a:9901", Secrets: []envoystate.Secret{{Name: "web", State: envoystate.SecretActive, HasCertificate: true, WatchedDir: "/certs", Chain: f.cur.Chain()}}}
	static := &envoystate.Snapshot{AdminURL: "http://b:9901", Secrets: []envoystate.Secret{{Name: "web", State: envoystate.SecretStatic, HasCertificate: true, Chain: f.cur.Chain()}}}
	bind := []config.Binding{{Source: "shop/web", Secret: "web"}}
	cases := map[string]struct {
		ev   EnvoyView
		want string
	}{
		"FileSDS":      {pod("shop", "a", "Deployment/web", now, sds, bind), ReloadSelf},
		"StaticSecret": {pod("shop", "b", "Deployment/web", now, static, bind), ReloadRestart},
		"SubPath":      {withRisk(pod("shop", "c", "Deployment/web", now, sds, bind), "shop/web"), ReloadRestart},
		"NoHotReload":  {noHotReload(pod("shop", "d", "Deployment/web", now, sds, bind)), ReloadRestart},
		"MountOnlySDS": {pod("shop", "f", "Deployment/web", now, sds, []config.Binding{{Source: "shop/web", File: "/certs/tls.crt"}}), ReloadSelf},
		"MountOnlyStatic": {pod("shop", "g", "Deployment/web", now, &envoystate.Snapshot{AdminURL: "http://g:9901", Contexts: []envoystate.TLSContext{{Chain: []envoystate.CertDetail{detail("/certs/tls.crt", f.cur.Cert)}}}},
			[]config.Binding{{Source: "shop/web", File: "/certs/tls.crt"}}), ReloadRestart},
		"AlreadyStale": {pod("shop", "e", "Deployment/web", now, &envoystate.Snapshot{AdminURL: "http://e:9901", Secrets: []envoystate.Secret{{Name: "web", State: envoystate.SecretActive, HasCertificate: true, WatchedDir: "/certs", Chain: f.old.Chain()}}}, bind), ReloadRestart},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := Preflight(Inputs{Desired: d, Envoys: []EnvoyView{tc.ev}}, []desired.Candidate{{Source: "shop/web", From: "x", Chain: f.other.Chain()}}, config.DefaultPolicy, now, PreflightOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Reloads) != 1 || r.Reloads[0].Mode != tc.want {
				t.Errorf("reloads %+v, want one, %s", r.Reloads, tc.want)
			}
		})
	}
}

func TestPreflightBadInput(t *testing.T) {
	f := newFixture(t)
	in := Inputs{Desired: []desired.Observation{kubeDesired("shop/web", f.cur, now)}}
	for name, tc := range map[string]struct {
		cands []desired.Candidate
		want  string
	}{
		"UnknownSource": {[]desired.Candidate{{Source: "shop/nope", From: "a.pem", Chain: f.other.Chain()}}, "known: shop/web"},
		"Empty":         {[]desired.Candidate{{Source: "shop/web", From: "a.pem"}}, "neither a leaf nor a CA bundle"},
		"None":          {nil, "no candidate"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Preflight(in, tc.cands, config.DefaultPolicy, now, PreflightOptions{})
			var ie *PreflightInputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want a PreflightInputError saying %q", err, tc.want)
			}
		})
	}
	// Control: a known source is accepted.
	if _, err := Preflight(in, []desired.Candidate{{Source: "shop/web", From: "a.pem", Chain: f.other.Chain()}}, config.DefaultPolicy, now, PreflightOptions{}); err != nil {
		t.Errorf("a candidate for a known source: %v", err)
	}
}

// TestPreflightJSONDocumented keeps docs/preflight.md's JSON section and the report's json tags
// the same set: a field added, renamed or dropped fails until the page says so.
func TestPreflightJSONDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "preflight.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	i := strings.Index(page, "## JSON")
	j := strings.Index(page[i:], "\n## ")
	if i < 0 || j < 0 {
		t.Fatal("docs/preflight.md has no ## JSON section")
	}
	section := page[i : i+j]
	documented := map[string]bool{}
	for _, w := range regexp.MustCompile(`[a-z][a-z0-9_]*`).FindAllString(section, -1) {
		documented[w] = true
	}
	var tags []string
	for _, v := range []any{PreflightReport{}, PreflightCandidate{}, CertSummary{}, PreflightHandshake{}, PreflightReload{}} {
		rt := reflect.TypeOf(v)
		for k := 0; k < rt.NumField(); k++ {
			tag, _, _ := strings.Cut(rt.Field(k).Tag.Get("json"), ",")
			if tag != "" && tag != "-" {
				tags = append(tags, tag)
			}
		}
	}
	for _, tag := range tags {
		if !documented[tag] {
			t.Errorf("PreflightReport field %q is not in docs/preflight.md's JSON section", tag)
		}
	}
	// Control: the check sees a name that is not there.
	if documented["no_such_field"] {
		t.Error("the documented set holds everything: the check would pass anything")
	}
	for _, v := range []string{PreflightSafe, PreflightBreaks, PreflightUnknown, HandshakeAccepts, HandshakeRejects, HandshakeUnknown,
		PhaseNewLeafCurrentTrust, PhaseCurrentLeafNewBundle, PhaseNewLeafNewBundle, PhaseNewLeafSNI, ReloadSelf, ReloadRestart, ReloadUnknown} {
		if !strings.Contains(page, `"`+v+`"`) && !strings.Contains(page, "`"+v+"`") {
			t.Errorf("value %q is not documented in docs/preflight.md", v)
		}
	}
}

// TestPreflightSNI: a new leaf is judged against the SNIs its source is served under now.
func TestPreflightSNI(t *testing.T) {
	f := newFixture(t)
	snap := loadedFile(certPath, f.cur.Cert)
	in := Inputs{Desired: []desired.Observation{desiredObs("web", f.cur, now.Add(-time.Hour))},
		Envoys: []EnvoyView{envoy("edge", snap, ep, served(ep[0].Address, "www.example.com", f.cur.Cert))}}
	for name, tc := range map[string]struct {
		leaf        *certs.Leaf
		wantResult  string
		wantVerdict string
	}{
		"Covers":       {f.old, HandshakeAccepts, PreflightSafe},
		"DoesNotCover": {f.other, HandshakeRejects, PreflightBreaks},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := Preflight(in, []desired.Candidate{{Source: "web", From: "new.pem", Chain: tc.leaf.Chain()}}, config.DefaultPolicy, now, PreflightOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Handshakes) != 1 || r.Handshakes[0].Phase != PhaseNewLeafSNI || r.Handshakes[0].Result != tc.wantResult || r.Verdict != tc.wantVerdict {
				t.Errorf("handshakes %+v, verdict %s; want one %s %s, %s", r.Handshakes, r.Verdict, PhaseNewLeafSNI, tc.wantResult, tc.wantVerdict)
			}
			var b strings.Builder
			if err := RenderPreflightTable(&b, r); err != nil {
				t.Fatal(err)
			}
			if got := b.String(); !strings.Contains(got, strings.ToUpper(tc.wantVerdict)) || !strings.Contains(got, "SAFE ORDER") ||
				(tc.wantResult == HandshakeRejects) != strings.Contains(got, "WOULD FAIL") {
				t.Errorf("table does not show the verdict, the steps and (only when rejected) WOULD FAIL:\n%s", got)
			}
		})
	}
}

// TestPreflightNamesMergedItem: one item of a merged source is named as audit prints it
// ("source/item"); the candidate replaces that item only, and an item the source does not hold
// is bad input naming what is known.
func TestPreflightNamesMergedItem(t *testing.T) {
	ca := certs.NewCA(t)
	a, b, b2 := ca.Leaf(t, certs.WithDNSNames("a.example.com")), ca.Leaf(t, certs.WithDNSNames("b.example.com")), ca.Leaf(t, certs.WithDNSNames("b.example.com"))
	merged := desired.Observation{Ref: kubeRef("gw/certs"), ChangedAt: now.Add(-time.Hour), Items: []desired.Item{
		{Name: "a.example.com", Chain: a.Chain(), CA: []*x509.Certificate{ca.Cert}},
		{Name: "b.example.com", Chain: b.Chain(), CA: []*x509.Certificate{ca.Cert}},
	}}
	in := Inputs{Config: &config.Config{}, Desired: []desired.Observation{merged}}
	r, err := Preflight(in, []desired.Candidate{cand("gw/certs/b.example.com", b2)}, config.DefaultPolicy, time.Now(), PreflightOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Candidates) != 1 || r.Candidates[0].Source != "gw/certs" || r.Candidates[0].Item != "b.example.com" || !r.Candidates[0].LeafChanged {
		t.Errorf("candidate for gw/certs/b.example.com: %+v, want source gw/certs item b.example.com, leaf changed", r.Candidates)
	}
	if got := verdictLines(r); !slices.Equal(got, []string{"accepts new_leaf_own_bundle  audit of gw/certs/b.example.com once written (its own CA bundle) <- outside"}) {
		t.Errorf("handshakes %q (%+v): want the new leaf judged against the merged source's own bundle", got, r.Handshakes)
	}
	_, err = Preflight(in, []desired.Candidate{cand("gw/certs/c.example.com", b2)}, config.DefaultPolicy, time.Now(), PreflightOptions{})
	var ie *PreflightInputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "gw/certs/a.example.com") {
		t.Errorf("an item the source does not hold: %v, want bad input listing the known items", err)
	}
}
