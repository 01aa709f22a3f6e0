package exporter

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/collector"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/test/certs"
)

// TestDesiredQueue feeds the queue inventory changes as the informer would and checks the store's
// exposed text: an update shows the new leaf, a delete removes the Secret's series, ConfigMap
// changes are ignored, and none of it waits for a round.
func TestDesiredQueue(t *testing.T) {
	ca := certs.NewCA(t)
	oldLeaf, newLeaf := ca.Leaf(t), ca.Leaf(t)
	summary := func(name string, l *certs.Leaf) *kube.SecretSummary {
		return &kube.SecretSummary{Namespace: "ns", Name: name, Items: []kube.ItemSummary{{CertKey: "tls.crt",
			Chain: []kube.Cert{{DER: l.Cert.Raw}}}}}
	}
	store := collector.NewStore(collector.Options{})
	start := time.Now()
	store.Record(collector.Round{Kubernetes: true, Started: start, Finished: start.Add(time.Millisecond),
		Inputs: desiredInputs(summary("a", oldLeaf), summary("b", oldLeaf))})

	q := newDesiredQueue()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.run(ctx, store)
	q.add(kube.Change{Op: kube.Updated, Kind: "ConfigMap", Namespace: "ns", Name: "bundle", ConfigMap: &kube.ConfigMapSummary{}})
	q.add(kube.Change{Op: kube.Updated, Kind: "Secret", Namespace: "ns", Name: "a", Secret: summary("a", oldLeaf)})
	q.add(kube.Change{Op: kube.Updated, Kind: "Secret", Namespace: "ns", Name: "a", Secret: summary("a", newLeaf)})
	q.add(kube.Change{Op: kube.Deleted, Kind: "Secret", Namespace: "ns", Name: "b", Secret: summary("b", oldLeaf)})

	want := map[string]string{"ns/a": pki.Fingerprint(newLeaf.Cert), "ns/b": ""}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := map[string]string{"ns/a": desiredFingerprintIn(store, "ns/a"), "ns/b": desiredFingerprintIn(store, "ns/b")}
		if got["ns/a"] == want["ns/a"] && got["ns/b"] == want["ns/b"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("desired fingerprints %v, want %v", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func desiredInputs(ss ...*kube.SecretSummary) (in audit.Inputs) {
	snap := kube.Snapshot{Secrets: append([]*kube.SecretSummary(nil), ss...)}
	in.Desired = snap.Observations()
	return in
}

// desiredFingerprintIn reads the store's exposition as a scrape would.
func desiredFingerprintIn(store *collector.Store, source string) string {
	h, err := store.Handler(collector.HandlerOpts{})
	if err != nil {
		return "error: " + err.Error()
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		return "error: " + err.Error()
	}
	for _, m := range mfs["certdrift_certificate_info"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		if l["view"] == "desired" && l["source"] == source {
			return l["fingerprint_sha256"]
		}
	}
	return ""
}
