package gather

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/testbed"
)

// TestSessionRejudgesChangedSecrets runs rounds of a Session against the testbed's real API
// server, as `certdrift serve` does, and checks that the verdicts the session carries between
// rounds (audit.Memo) never hide a change: a Secret rewritten under the same name with a leaf its
// ca.crt does not sign gets CA_BUNDLE_GAP in the next round; a new resourceVersion with
// unchanged data keeps its verdict (both ways: still reported while broken, still clean once
// fixed); a deleted Secret leaves nothing in the memo. Each round's report must equal a Run of
// the same inputs without the memo.
func TestSessionRejudgesChangedSecrets(t *testing.T) {
	tb := testbed.StartT(t, testbed.Options{Nodes: -1}) // fails with how to build the binaries when absent
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(tb.Config)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "memo"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca, other := certs.NewCA(t, certs.WithCommonName("memo-ca")), certs.NewCA(t, certs.WithCommonName("other-ca"))
	good, bad := ca.Leaf(t, certs.WithDNSNames("a.memo.example")), other.Leaf(t, certs.WithDNSNames("a.memo.example"))
	secret := func(leaf *certs.Leaf) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": leaf.ChainPEM(), "tls.key": leaf.KeyPEM, "ca.crt": certs.Bundle(ca)}}
	}
	changed := make(chan struct{}, 64)
	s, err := Start(ctx, tb.Config, config.DefaultPolicy, KubeOptions{Namespaces: []string{ns},
		OnDesiredChange: func(kube.Change) {
			select {
			case changed <- struct{}{}:
			default: // a wake-up is pending already
			}
		}, Options: Options{Concurrency: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// round waits until the inventory holds Secret a at resourceVersion rv ("" for gone), then
	// gathers and judges like a serve round, checking the memo changed nothing.
	round := func(step, rv string) audit.Report {
		t.Helper()
		for {
			var have string
			for _, sum := range s.Inventory().Snapshot().Secrets {
				if sum.Name == "a" {
					have = sum.ResourceVersion
				}
			}
			if have == rv {
				break
			}
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("%s: the inventory never showed resourceVersion %q (has %q)", step, rv, have)
			}
		}
		in := s.Gather(ctx, Fleet)
		if in.Memo == nil {
			t.Fatalf("%s: the session's round carries no memo", step)
		}
		now := time.Now()
		got := audit.Run(in, config.DefaultPolicy, now)
		in.Memo = nil
		if want := audit.Run(in, config.DefaultPolicy, now); len(want.Findings) != len(got.Findings) {
			t.Fatalf("%s: %d findings with the session's memo, %d without", step, len(got.Findings), len(want.Findings))
		}
		return got
	}
	gap := func(r audit.Report) bool {
		for _, f := range r.Findings {
			if f.Code == audit.CABundleGap && f.Subject.Source == ns+"/a" {
				return true
			}
		}
		return false
	}

	created, err := cs.CoreV1().Secrets(ns).Create(ctx, secret(good), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := round("created", created.ResourceVersion); gap(r) {
		t.Fatalf("created: CA_BUNDLE_GAP for a leaf its ca.crt signs: %+v", r.Findings)
	}
	if r := round("unchanged", created.ResourceVersion); gap(r) || s.verdicts.Stats().Hits != 1 {
		t.Fatalf("unchanged: gap %v, memo %+v: want the clean verdict reused", gap(r), s.verdicts.Stats())
	}

	upd := secret(bad)
	upd.ResourceVersion = created.ResourceVersion
	updated, err := cs.CoreV1().Secrets(ns).Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := round("new data under the same name", updated.ResourceVersion); !gap(r) {
		t.Fatalf("new data under the same name: no CA_BUNDLE_GAP after the Secret got a leaf from another CA: %+v", r.Findings)
	}

	updated.Annotations = map[string]string{"touched": "1"} // a new resourceVersion, the same data
	touched, err := cs.CoreV1().Secrets(ns).Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := round("new resourceVersion, same broken data", touched.ResourceVersion); !gap(r) {
		t.Fatalf("new resourceVersion, same broken data: CA_BUNDLE_GAP gone: %+v", r.Findings)
	}

	fixed := secret(good)
	fixed.ResourceVersion = touched.ResourceVersion
	fixedNow, err := cs.CoreV1().Secrets(ns).Update(ctx, fixed, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := round("fixed", fixedNow.ResourceVersion); gap(r) {
		t.Fatalf("fixed: CA_BUNDLE_GAP still reported: %+v", r.Findings)
	}

	if err := cs.CoreV1().Secrets(ns).Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	round("deleted", "")
	if n := s.verdicts.Stats().Entries; n != 0 {
		t.Fatalf("deleted: the memo still holds %d verdicts", n)
	}
}
