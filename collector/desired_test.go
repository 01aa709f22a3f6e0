package collector

import (
	"bytes"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/ref"
)

// TestUpdateDesired: inventory changes reach the exposition between rounds — an updated Secret's
// new fingerprint, a deleted Secret's series gone, a new Secret's series there — and the
// certificate series are then exactly what a round over the updated inputs would expose, while
// the exposition a scrape already holds is never modified. A round that started before an update
// does not undo it.
func TestUpdateDesired(t *testing.T) {
	s := NewStore(Options{Now: clock(t0.Add(time.Minute))})
	h := storeHandler(t, s)
	text := func() string {
		_, b := scrape(t, h, acceptText, "gzip")
		return string(b)
	}
	obs := func(name string, c *x509.Certificate) desired.Observation {
		src, ok := ref.ParseKube(name)
		if !ok {
			t.Fatalf("%q is not a Kubernetes source name", name)
		}
		return desired.Observation{Ref: src, Items: []desired.Item{{Chain: []*x509.Certificate{c}}}}
	}
	certFamilies := []string{"certdrift_certificate_info", "certdrift_certificate_not_after_timestamp_seconds",
		"certdrift_certificate_not_before_timestamp_seconds"}

	s.Record(kubeRound(t0, true))
	before := s.current()
	var held bytes.Buffer
	if err := before.writeText(&held); err != nil {
		t.Fatal(err)
	}
	heldGz := bytes.Clone(before.gz)

	a2, c := cert("a2", 50), cert("c", 60)
	upd := t0.Add(10 * time.Second)
	s.UpdateDesired([]DesiredUpdate{
		{Observation: obs("ns-a/tls-a", a2)},
		{Observation: obs("ns-b/tls-b", nil), Deleted: true},
		{Observation: obs("ns-c/tls-c", c)},
	}, upd)
	var after bytes.Buffer
	if err := before.writeText(&after); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(held.Bytes(), after.Bytes()) || !bytes.Equal(heldGz, before.gz) {
		t.Error("UpdateDesired modified the exposition of the previous generation")
	}

	// The oracle: a round that read the updated inventory.
	want := kubeRound(t0, true)
	want.Inputs.Desired = []desired.Observation{obs("ns-a/tls-a", a2), want.Inputs.Desired[2], obs("ns-c/tls-c", c)}
	oracle := NewStore(Options{Now: clock(t0.Add(time.Minute))})
	oracle.Record(want)
	var golden bytes.Buffer
	if err := oracle.current().writeText(&golden); err != nil {
		t.Fatal(err)
	}
	compareGolden(t, s, golden.String(), certFamilies...)

	got := text()
	for _, tc := range []struct {
		name, source, want string
	}{
		{name: "Updated", source: "ns-a/tls-a", want: pki.Fingerprint(a2)},
		{name: "Deleted", source: "ns-b/tls-b", want: ""},
		{name: "Added", source: "ns-c/tls-c", want: pki.Fingerprint(c)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if fp := desiredFP(got, tc.source); fp != tc.want {
				t.Errorf("desired fingerprint of %s = %q, want %q", tc.source, fp, tc.want)
			}
		})
	}

	// A round that began before the update read the old Secret: the update stays.
	stale := kubeRound(upd.Add(time.Second), true)
	stale.Started = upd.Add(-time.Second)
	s.Record(stale)
	if fp := desiredFP(text(), "ns-a/tls-a"); fp != pki.Fingerprint(a2) {
		t.Errorf("after a round started before the update: fingerprint %q, want the update's %q", fp, pki.Fingerprint(a2))
	}
	compareGolden(t, s, golden.String(), certFamilies...)
	// A round that began after it read the new state itself: the override is dropped.
	fresh := kubeRound(upd.Add(3*time.Second), true)
	s.Record(fresh)
	if fp := desiredFP(text(), "ns-a/tls-a"); fp != pki.Fingerprint(cert("a", 30)) {
		t.Errorf("after a round started after the update: fingerprint %q, want the round's", fp)
	}
}

// TestUpdateDesiredBeforeFirstRound: nothing is exposed before the first round; the update waits
// for it and is applied if the round may have missed it.
func TestUpdateDesiredBeforeFirstRound(t *testing.T) {
	s := NewStore(Options{Now: clock(t0)})
	a2 := cert("a2", 50)
	s.UpdateDesired([]DesiredUpdate{{Observation: desired.Observation{Ref: ref.Source{Kind: ref.Secret, Namespace: "ns-a", Name: "tls-a"},
		Items: []desired.Item{{Chain: []*x509.Certificate{a2}}}}}}, t0.Add(500*time.Millisecond))
	if s.Ready() {
		t.Fatal("ready before the first round")
	}
	_, b := scrape(t, storeHandler(t, s), acceptText, "")
	if strings.Contains(string(b), "certdrift_certificate_info") {
		t.Errorf("certificate series before the first round:\n%s", b)
	}
	s.Record(kubeRound(t0.Add(time.Second), false)) // started at t0, before the update: may have missed it
	_, b = scrape(t, storeHandler(t, s), acceptText, "")
	if fp := desiredFP(string(b), "ns-a/tls-a"); fp != pki.Fingerprint(a2) {
		t.Errorf("fingerprint %q, want the update's %q", fp, pki.Fingerprint(a2))
	}
}

// desiredFP is the fingerprint_sha256 of source's desired certdrift_certificate_info, "" if none.
func desiredFP(text, source string) string {
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "certdrift_certificate_info{") || !strings.Contains(l, `view="desired"`) ||
			!strings.Contains(l, `source="`+source+`"`) {
			continue
		}
		_, rest, _ := strings.Cut(l, `fingerprint_sha256="`)
		fp, _, _ := strings.Cut(rest, `"`)
		return fp
	}
	return ""
}
