package collector

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/probe/kube"
)

// certManagerRound is a Kubernetes round in which cert-manager renewed shop/web-cert to revision
// 3, the Secret holds it, gw-0 serves it and gw-1 still serves revision 2.
func certManagerRound(at time.Time) Round {
	r := Round{Kubernetes: true, Started: at.Add(-time.Second), Finished: at, SourcesUp: map[string]bool{"kubernetes": true}}
	r.Inputs.CertManager = kube.CertManager{Read: true, Present: true}
	r.Report.CertManager = []audit.CertificateStatus{{Namespace: "shop", Name: "web-cert", Source: "shop/web", Revision: 3, Ready: "True",
		RenewalTime: time.Unix(1_800_000_000, 0), SecretRevision: 3, Envoys: []audit.EnvoyRevision{
			{Envoy: "shop/gw-0", View: "served", Fingerprint: "aa", Revision: 3},
			{Envoy: "shop/gw-1", View: "served", Fingerprint: "bb", Revision: 2},
			{Envoy: "shop/gw-1", View: "served", Fingerprint: "cc", Revision: 0},
		}}}
	return r
}

// TestCertManagerSeries: the exposition of a round with cert-manager, an absent cert-manager, an
// unreadable one, and a local round (none at all).
func TestCertManagerSeries(t *testing.T) {
	t0 := time.Unix(1_790_000_000, 0)
	absent := Round{Kubernetes: true, Finished: t0}
	absent.Inputs.CertManager = kube.CertManager{Read: true}
	unreadable := Round{Kubernetes: true, Finished: t0}
	unreadable.Inputs.CertManager = kube.CertManager{Read: true, Present: true, Err: errors.New("forbidden")}
	cases := map[string]struct {
		reason string
		round  Round
		want   []string
	}{
		"Renewed": {
			reason: "revision 3 in the Secret and at gw-0; gw-1 serves revision 2 (its newest of two copies)",
			round:  certManagerRound(t0),
			want: []string{
				`certdrift_certmanager_certificate_ready{certificate="web-cert",namespace="shop",source="shop/web"} 1`,
				`certdrift_certmanager_certificate_renewal_timestamp_seconds{certificate="web-cert",namespace="shop",source="shop/web"} 1.8e+09`,
				`certdrift_certmanager_certificate_revision{certificate="web-cert",namespace="shop",source="shop/web"} 3`,
				`certdrift_certmanager_present 1`,
				`certdrift_certmanager_revision{certificate="web-cert",namespace="shop",source="shop/web",view="desired"} 3`,
				`certdrift_certmanager_revision{certificate="web-cert",envoy="shop/gw-0",namespace="shop",source="shop/web",view="served"} 3`,
				`certdrift_certmanager_revision{certificate="web-cert",envoy="shop/gw-1",namespace="shop",source="shop/web",view="served"} 2`,
				`certdrift_certmanager_up 1`,
			},
		},
		"Absent": {reason: "no CRDs: present 0, nothing else", round: absent, want: []string{`certdrift_certmanager_present 0`}},
		"Unreadable": {reason: "served but forbidden: up 0", round: unreadable,
			want: []string{`certdrift_certmanager_present 1`, `certdrift_certmanager_up 0`}},
		"Local": {reason: "not read at all: no series", round: Round{Finished: t0}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := NewStore(Options{Now: clock(t0)})
			s.Record(tc.round)
			_, body := scrape(t, storeHandler(t, s), acceptText, "")
			var got []string
			for _, line := range strings.Split(string(body), "\n") {
				if strings.HasPrefix(line, "certdrift_certmanager_") {
					got = append(got, line)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// TestCertManagerShardsSplit: split over N replicas, each Certificate's own series come from the
// replica that owns its Secret and each Envoy's revision from the replica that owns the Envoy
// (the only one that reads it, so the only one whose report has it). Together the replicas
// expose exactly the unsharded series, each once. Before, an Envoy's revision was exposed by the
// Secret's replica, which never reads another replica's Envoys: it was lost.
func TestCertManagerShardsSplit(t *testing.T) {
	t0 := time.Unix(1_790_000_000, 0)
	lines := func(s *Store) []string {
		_, body := scrape(t, storeHandler(t, s), acceptText, "")
		var out []string
		for _, line := range strings.Split(string(body), "\n") {
			// present and up are each replica's own view of cert-manager, not split.
			if strings.HasPrefix(line, "certdrift_certmanager_") && !strings.HasPrefix(line, "certdrift_certmanager_present") &&
				!strings.HasPrefix(line, "certdrift_certmanager_up") {
				out = append(out, line)
			}
		}
		return out
	}
	whole := NewStore(Options{Now: clock(t0)})
	whole.Record(certManagerRound(t0))
	want := lines(whole)
	slices.Sort(want)
	for _, total := range []int{2, 3, 5} {
		crossed := false
		var got []string
		for i := range total {
			sh := Shard{Index: i, Total: total}
			r := certManagerRound(t0)
			st := &r.Report.CertManager[0]
			kept := st.Envoys[:0]
			for _, e := range st.Envoys {
				if sh.Owns(e.Envoy) { // gather reads only the replica's own Envoys
					kept = append(kept, e)
					crossed = crossed || !sh.Owns("shop/web")
				}
			}
			st.Envoys = kept
			s := NewStore(Options{Now: clock(t0), Shard: sh})
			s.Record(r)
			got = append(got, lines(s)...)
		}
		if !crossed {
			t.Fatalf("%d shards: no Envoy lands in another shard than its Secret; the fixture proves nothing", total)
		}
		slices.Sort(got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%d shards: the replicas' cert-manager series together (-unsharded +sharded):\n%s", total, diff)
		}
	}
}
