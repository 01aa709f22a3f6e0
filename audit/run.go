package audit

import (
	"cmp"
	"slices"
	"time"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/envoystate"
)

// auditor carries the state of one Run. Every check is a method that reads the inputs and calls
// add; none does I/O.
type auditor struct {
	now      time.Time
	policy   config.Policy
	cfg      *config.Config
	desired  *desiredIndex
	findings []Finding
	bindings []Binding
	// seenValidity de-duplicates expiry findings: one certificate seen in several views is
	// reported once, where it was seen first (desired before loaded before served).
	seenValidity map[string]bool
	pathIndex    map[*envoystate.Snapshot]map[string][]envoystate.CertDetail
	// served keeps every handshake with the binding it was judged against, for the checks
	// across Envoys (replicas, peer pairings).
	served []servedRecord
	// memo is this Run's use of Inputs.Memo (nil without one).
	memo *memoRun
	// envoys are the Envoys judged, in canonical order (served records point into it).
	envoys []EnvoyView
	// chains checks served chains once per distinct (chain, bundle): the Memo's, kept across
	// Runs, or one for this Run (a fleet's replicas serve the same chain).
	chains *pki.ChainCache
	// leafKeys finds desired certificates by their leaf's validity key (unbound.go), built on
	// first use.
	leafKeys map[string][]*desiredCert
}

// Run judges in against policy at time now. It is a pure function: the same inputs give the same
// report.
func Run(in Inputs, policy config.Policy, now time.Time) Report {
	_, r := run(in, policy, now)
	return r
}

// run is Run, also returning the auditor with what it learnt on the way (the desired index, every
// handshake with its binding, the canonical Envoys the handshakes point into), which preflight
// reads to judge a rotation against the same bindings.
func run(in Inputs, policy config.Policy, now time.Time) (*auditor, Report) {
	cfg := in.Config
	if cfg == nil {
		cfg = &config.Config{}
	}
	in.Desired, in.Envoys = canonicalDesired(in.Desired), canonicalEnvoys(in.Envoys)
	a := &auditor{now: now, policy: policy, cfg: cfg, desired: indexDesired(in.Desired), seenValidity: map[string]bool{},
		pathIndex: map[*envoystate.Snapshot]map[string][]envoystate.CertDetail{}, memo: in.Memo.begin(), chains: in.Memo.chainCache()}
	a.checkDesired(in.Desired)
	a.memo.end()
	a.checkPairings()
	handshakes, handshakesJudged := 0, 0
	for i := range in.Envoys {
		ev := &in.Envoys[i]
		fromF, fromB := len(a.findings), len(a.bindings)
		a.checkEnvoy(ev)
		handshakes += len(ev.Served)
		for _, r := range ev.Served {
			if len(r.Chain) > 0 {
				handshakesJudged++
			}
		}
		if ev.Pod != nil && ev.Pod.Workload != "" {
			for j := fromF; j < len(a.findings); j++ {
				a.findings[j].Subject.Workload = cmp.Or(a.findings[j].Subject.Workload, ev.Pod.Workload)
			}
			for j := fromB; j < len(a.bindings); j++ {
				a.bindings[j].Workload = ev.Pod.Workload
			}
		}
	}
	a.checkReplicas(a.served)
	a.checkLivePairings(in.Envoys, a.served)
	certManager := a.checkCertManager(in.CertManager, in.Envoys)
	for i := range a.findings {
		// Every output (JSON, table, metrics' messages) gets errors said once, not as Go wraps
		// them ("dial X: dial tcp X: …").
		a.findings[i].Message = unstutter(a.findings[i].Message)
	}
	sortFindings(a.findings)
	sortBindings(a.bindings)
	r := Report{
		GeneratedAt: now,
		Bindings:    a.bindings,
		Findings:    a.findings,
		Summary: Summary{
			DesiredSources: len(in.Desired),
			Envoys:         len(in.Envoys),
			Handshakes:     handshakes,
			Bindings:       len(a.bindings),
			Findings:       map[string]int{},
		},
		CertManager: certManager,
	}
	for _, f := range a.findings {
		r.Summary.Findings[f.Severity.String()]++
	}
	r.Summary.Coverage = coverageOf(a.bindings, a.findings, handshakes, handshakesJudged)
	if r.Bindings == nil {
		r.Bindings = []Binding{}
	}
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	a.envoys = in.Envoys
	return a, r
}

func (a *auditor) add(f Finding) { a.findings = append(a.findings, f) }

// sortFindings orders by severity (worst first), then by Envoy, source and code so that reports
// are stable between runs.
func sortFindings(fs []Finding) {
	slices.SortStableFunc(fs, func(x, y Finding) int {
		return cmp.Or(
			cmp.Compare(y.Severity, x.Severity),
			cmp.Compare(x.Subject.Envoy, y.Subject.Envoy),
			cmp.Compare(x.Subject.Source, y.Subject.Source),
			cmp.Compare(x.Subject.Item, y.Subject.Item),
			cmp.Compare(x.Code, y.Code),
			cmp.Compare(x.Subject.Endpoint, y.Subject.Endpoint),
			cmp.Compare(x.Subject.SNI, y.Subject.SNI),
			cmp.Compare(x.Message, y.Message),
		)
	})
}

// sortBindings orders bindings by Envoy, source and kind, so that the report does not depend on
// the order of the inputs.
func sortBindings(bs []Binding) {
	slices.SortStableFunc(bs, func(x, y Binding) int {
		return cmp.Or(
			cmp.Compare(x.Envoy, y.Envoy),
			cmp.Compare(x.Source, y.Source),
			cmp.Compare(x.Item, y.Item),
			compareBool(x.Trust, y.Trust),
			cmp.Compare(x.Secret, y.Secret),
			cmp.Compare(x.File, y.File),
			cmp.Compare(x.Endpoint, y.Endpoint),
		)
	})
}

func compareBool(x, y bool) int {
	switch {
	case x == y:
		return 0
	case !x:
		return -1
	}
	return 1
}

func coverageOf(bs []Binding, fs []Finding, handshakes, handshakesJudged int) Coverage {
	c := Coverage{Bindings: len(bs), Handshakes: handshakes, HandshakesJudged: handshakesJudged}
	for _, b := range bs {
		if b.State != StateUnknown {
			c.BindingsJudged++
		}
	}
	for _, f := range fs {
		if gapCodes[f.Code] {
			c.Gaps++
		}
	}
	c.Complete = c.Gaps == 0 && c.BindingsJudged == c.Bindings && c.HandshakesJudged == c.Handshakes
	return c
}

// Clean reports whether the report has no finding at or above failOn and judged everything it
// found: a report that could not look is never clean.
func (r Report) Clean(failOn Severity) bool {
	return r.MaxSeverity() < failOn && r.Summary.Coverage.Complete
}

// MaxSeverity returns the worst severity in the report, or 0 when it is clean.
func (r Report) MaxSeverity() Severity {
	var m Severity
	for _, f := range r.Findings {
		m = max(m, f.Severity)
	}
	return m
}
