package collector

import (
	"crypto/x509"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/tlsprobe"
	"github.com/certdrift/certdrift/ref"
	"github.com/certdrift/certdrift/test/certs"
)

// staticWorld is a local-mode world judged by the real audit: source "web" (a kubelet-layout
// directory whose certificate is desired) and a static-TLS Envoy that loaded and serves
// whatever certificate it read at its start.
type staticWorld struct {
	desired, envoy *x509.Certificate
	changedAt      time.Time
}

const (
	firstRoundHost = "www.example.com"
	firstRoundAddr = "127.0.0.1:9443"
	firstRoundFile = "/secret/web/tls.crt"
)

func (w staticWorld) inputs() audit.Inputs {
	detail := func(c *x509.Certificate) envoystate.CertDetail {
		return envoystate.CertDetail{Path: firstRoundFile, Serial: c.SerialNumber, SerialText: c.SerialNumber.Text(16),
			DNSNames: c.DNSNames, ValidFrom: c.NotBefore, Expiration: c.NotAfter}
	}
	return audit.Inputs{
		Config: &config.Config{},
		Desired: []desired.Observation{{Ref: ref.Source{Kind: ref.File, Name: "web"}, Dir: "/secret/web", ChangedAt: w.changedAt,
			Items: []desired.Item{{CertPath: firstRoundFile, Chain: []*x509.Certificate{w.desired}}}}},
		Envoys: []audit.EnvoyView{{
			Config: config.Envoy{Name: "static", Admin: "http://127.0.0.1:9901",
				Endpoints: []config.Endpoint{{Address: firstRoundAddr, SNI: []string{firstRoundHost}}}},
			Admin: &envoystate.Snapshot{AdminURL: "http://127.0.0.1:9901",
				Contexts: []envoystate.TLSContext{{Chain: []envoystate.CertDetail{detail(w.envoy)}}}},
			Served: []tlsprobe.Result{{Target: tlsprobe.Target{Address: firstRoundAddr, SNI: firstRoundHost},
				Chain: []*x509.Certificate{w.envoy}, Duration: 5 * time.Millisecond}},
		}},
	}
}

// judged is one serve round as the exporter makes it: the inputs, judged by audit.Run at now.
func judged(in audit.Inputs, now time.Time) Round {
	return Round{Inputs: in, Report: audit.Run(in, config.DefaultPolicy, now), Started: now.Add(-time.Second), Finished: now,
		SourcesUp: map[string]bool{"files": true}}
}

// findingKey is what of a finding certdrift_finding carries in local mode.
func findingKey(code, severity, envoy, source, secret, sni string) string {
	return strings.Join([]string{code, severity, envoy, source, secret, sni}, "|")
}

// TestFirstRoundJudgesLikeAudit: a `certdrift serve` whose first round meets an Envoy that
// never loaded the rotated certificate reports what `certdrift audit` reports on the same inputs
// — the same findings, drift dated from the desired change rather than from the process start,
// the binding counted as a pending rotation — and observes the convergence, with its whole
// duration, once the Envoy restarts with the new certificate.
func TestFirstRoundJudgesLikeAudit(t *testing.T) {
	ca := certs.NewCA(t, certs.WithCommonName("first-round-ca"))
	v1 := ca.Leaf(t, certs.WithCommonName("v1"), certs.WithDNSNames(firstRoundHost))
	v2 := ca.Leaf(t, certs.WithCommonName("v2"), certs.WithDNSNames(firstRoundHost))
	start := time.Now().Truncate(time.Second)
	cases := map[string]struct {
		reason    string
		changedAt time.Time
		// wantStart is when the drift and convergence clocks must start.
		wantStart time.Time
	}{
		"ChangeTimeKnown": {
			reason:    "the file's mtime, ten minutes before the process started, dates the drift",
			changedAt: start.Add(-10 * time.Minute), wantStart: start.Add(-10 * time.Minute),
		},
		"ChangeTimeUnknown": {
			reason:    "no change time: audit judges it stale at once, and the clocks start at the first round",
			wantStart: start,
		},
		"ChangeTimeInTheFuture": {
			reason:    "an mtime ahead of the clock cannot date anything: the first round does",
			changedAt: start.Add(time.Hour), wantStart: start,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := staticWorld{desired: v2.Cert, envoy: v1.Cert, changedAt: tc.changedAt}.inputs()
			report := audit.Run(in, config.DefaultPolicy, start)
			// A future change time makes audit call the binding converging; the other cases are stale.
			var want []string
			for _, f := range report.Findings {
				want = append(want, findingKey(string(f.Code), f.Severity.String(), f.Subject.Envoy, f.Subject.Source, f.Subject.Secret, f.Subject.SNI))
			}
			slices.Sort(want)
			want = slices.Compact(want)

			s := NewStore(Options{Now: clock(start)})
			s.Record(judged(in, start))
			mfs := gatherStore(t, s)
			var got []string
			for _, m := range family(mfs, "certdrift_finding") {
				l := labelMap(m)
				got = append(got, findingKey(l["code"], l["severity"], l["envoy"], l["source"], l["secret"], l["sni"]))
			}
			slices.Sort(got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s: serve's first-round findings differ from audit's (-audit +serve):\n%s", tc.reason, diff)
			}

			stale := report.Summary.Bindings == 1 && report.Bindings[0].State == audit.StateStale
			if tc.changedAt.After(start) {
				if stale {
					t.Fatalf("audit judged a binding whose change is in the future stale: the case proves nothing")
				}
			} else {
				if !stale {
					t.Fatalf("audit did not judge the static Envoy stale (bindings %+v): the case proves nothing", report.Bindings)
				}
				for _, code := range []audit.Code{audit.StaleLoaded, audit.StaleServed} {
					if !slices.ContainsFunc(got, func(k string) bool { return strings.HasPrefix(k, string(code)+"|") }) {
						t.Errorf("%s: no %s series in the first round: %v", tc.reason, code, got)
					}
				}
				ages := family(mfs, "certdrift_drift_age_seconds")
				if len(ages) != 1 || ages[0].GetGauge().GetValue() != start.Sub(tc.wantStart).Seconds() {
					t.Errorf("%s: drift age %v, want one series of %gs", tc.reason, ages, start.Sub(tc.wantStart).Seconds())
				}
			}
			if got := gaugeOf(mfs, "certdrift_bindings_converging"); got != 1 {
				t.Errorf("%s: certdrift_bindings_converging = %g in the first round, want 1: the rotation-not-converging alert could never fire", tc.reason, got)
			}

			// The Envoy restarts and reads v2: the rotation converged, timed from its start.
			later := start.Add(time.Minute)
			s.Record(judged(staticWorld{desired: v2.Cert, envoy: v2.Cert, changedAt: tc.changedAt}.inputs(), later))
			mfs = gatherStore(t, s)
			h := family(mfs, "certdrift_rotation_convergence_seconds")
			wantSum := later.Sub(tc.wantStart).Seconds()
			if len(h) != 1 || h[0].GetHistogram().GetSampleCount() != 1 || math.Abs(h[0].GetHistogram().GetSampleSum()-wantSum) > 1e-9 {
				t.Errorf("%s: convergence histogram %v, want one observation of %gs", tc.reason, h, wantSum)
			}
			if got := gaugeOf(mfs, "certdrift_bindings_converging"); got != 0 {
				t.Errorf("certdrift_bindings_converging = %g after convergence, want 0", got)
			}
			if n := len(family(mfs, "certdrift_finding")) + len(family(mfs, "certdrift_drift_age_seconds")); n != 0 {
				t.Errorf("%d finding or drift series after convergence, want none", n)
			}
		})
	}
}

func family(mfs []*dto.MetricFamily, name string) []*dto.Metric {
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

func labelMap(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// gaugeOf is the value of a family's only series; NaN when it has none or several.
func gaugeOf(mfs []*dto.MetricFamily, name string) float64 {
	ms := family(mfs, name)
	if len(ms) != 1 {
		return math.NaN()
	}
	return ms[0].GetGauge().GetValue()
}
