package inventory

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/internal/kubetest"
	"github.com/certdrift/certdrift/ref"
	"github.com/certdrift/certdrift/test/certs"
)

// TestPromote runs a shard's inventory (Options.Full: it owns one Secret of four) beside an
// unsharded one on a real API server. The shard's Snapshot holds only its own Secret; Promote
// adds those of a namespace and those named, each read once and then kept while unchanged, with
// the very summaries (certificates, key facts, errors) and change records the unsharded
// inventory keeps — including a change whose time only the informer saw (two updates in one
// second: ChangedObserved), which a fresh read would have dated by managedFields instead.
func TestPromote(t *testing.T) {
	tb := controlPlane(t)
	admin := kubetest.FastAdmin(t, tb)
	nsA, nsB := kubetest.UniqueNS(t, "promote-a"), kubetest.UniqueNS(t, "promote-b")
	kubetest.CreateNamespaces(t, admin, nsA, nsB)
	root := certs.NewCA(t)
	leaf := func(name string) *certs.Leaf { return root.Leaf(t, certs.WithDNSNames(name+".example")) }
	a1, a2, b1, b2, other := leaf("a1"), leaf("a2"), leaf("b1"), leaf("b2"), leaf("other")
	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(nsA, "a1", a1.CertPEM, a1.KeyPEM, root.CertPEM))
	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(nsA, "a2", a2.CertPEM, a2.KeyPEM, root.CertPEM))
	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(nsB, "b1", b1.CertPEM, b1.KeyPEM, root.CertPEM))
	// A key that is not the leaf's and a CA key that is no PEM: the facts and errors must
	// survive promotion too.
	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(nsB, "b2", b2.CertPEM, other.KeyPEM, []byte("not a bundle")))

	scope := []string{nsA, nsB}
	owns := func(ns, name string) bool { return name == "a1" }
	shard := startInventory(t, tb.Config, Options{Namespaces: scope, Full: owns})
	full := startInventory(t, tb.Config, Options{Namespaces: scope})
	waitSynced(t, shard)
	waitSynced(t, full)

	ctx := context.Background()
	if got := keys(shard.Snapshot()); fmt.Sprint(got) != fmt.Sprint([]string{nsA + "/a1"}) {
		t.Fatalf("shard snapshot holds %v, want only its own Secret", got)
	}
	if st := stubOrSummary(shard, nsA, "a2"); st == nil || !st.Stub || st.Items != nil || st.ChangedAt.IsZero() {
		t.Fatalf("the shard keeps %+v for a Secret it does not own, want a stub with a change record and no items", st)
	}
	named := []ref.Source{{Kind: ref.Secret, Namespace: nsA, Name: "a2"}, {Kind: ref.ConfigMap, Namespace: nsA, Name: "a2"}}
	promote := func(prune bool) kube.Snapshot {
		return shard.Promote(ctx, shard.Snapshot(), []string{nsB}, named, prune)
	}
	requests := func() int64 { return shard.Stats().PromoteRequests }

	snap := promote(true)
	want := []string{nsA + "/a1", nsA + "/a2", nsB + "/b1", nsB + "/b2"}
	if got := keys(snap); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("promoted snapshot holds %v, want %v (sorted)", got, want)
	}
	if n := requests(); n != 3 {
		t.Errorf("%d Secrets read by name, want the 3 stubs", n)
	}
	sameAsFull(t, snap, full)
	promote(true)
	if n := requests(); n != 3 {
		t.Errorf("an unchanged round read %d Secrets by name, want none (3 in all)", n-3)
	}

	// Two writes in one second by one manager: managedFields cannot date the second, so the
	// informer records when it saw it (ChangedObserved). A stub changed so must keep that.
	cur, err := admin.CoreV1().Secrets(nsB).Get(ctx, "b1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Stamps have one-second resolution: two writes that straddle a second are both dated by
	// managedFields, so write again until the second one was not.
	for attempt := 0; ; attempt++ {
		for i := range 2 {
			l := leaf(fmt.Sprintf("b1-%d-%d", attempt, i))
			cur.Data = map[string][]byte{"tls.crt": l.CertPEM, "tls.key": l.KeyPEM, "ca.crt": root.CertPEM}
			if cur, err = admin.CoreV1().Secrets(nsB).Update(ctx, cur, metav1.UpdateOptions{FieldManager: "rotator"}); err != nil {
				t.Fatalf("update %d: %v", i, err)
			}
		}
		kubetest.Poll(t, "both inventories see the update", 5*time.Second, func() error {
			for _, inv := range []*Inventory{shard, full} {
				if rv := stubOrSummary(inv, nsB, "b1").ResourceVersion; rv != cur.ResourceVersion {
					return fmt.Errorf("resourceVersion %s, want %s", rv, cur.ResourceVersion)
				}
			}
			return nil
		})
		if how := stubOrSummary(full, nsB, "b1").ChangedHow; how == kube.ChangedObserved {
			break
		} else if attempt == 4 {
			t.Fatalf("five pairs of writes, the second always dated by managedFields (%s)", how)
		}
	}
	time.Sleep(1100 * time.Millisecond) // a read now would be dated a second later
	snap = promote(true)
	if n := requests(); n != 4 {
		t.Errorf("%d Secrets read by name after one changed, want 4", n)
	}
	sameAsFull(t, snap, full)

	// A label leaves ChangedAt alone, as in the unsharded inventory.
	cur.Labels = map[string]string{"touched": "yes"}
	if cur, err = admin.CoreV1().Secrets(nsB).Update(ctx, cur, metav1.UpdateOptions{FieldManager: "labeller"}); err != nil {
		t.Fatal(err)
	}
	kubetest.Poll(t, "the shard sees the label", 5*time.Second, func() error {
		if rv := stubOrSummary(shard, nsB, "b1").ResourceVersion; rv != cur.ResourceVersion {
			return fmt.Errorf("resourceVersion %s, want %s", rv, cur.ResourceVersion)
		}
		return nil
	})
	sameAsFull(t, promote(true), full)

	// A narrowed round keeps what it did not need; a fleet round drops it.
	shard.Promote(ctx, shard.Snapshot(), nil, nil, false)
	before := requests()
	promote(true)
	if n := requests() - before; n != 0 {
		t.Errorf("after a round that did not prune, %d Secrets read again, want none", n)
	}
	shard.Promote(ctx, shard.Snapshot(), nil, nil, true)
	promote(true)
	if n := requests() - before; n != 3 {
		t.Errorf("after a round that pruned, %d Secrets read again, want 3", n)
	}

	// A deleted stub is left out.
	if err := admin.CoreV1().Secrets(nsB).Delete(ctx, "b2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	kubetest.Poll(t, "b2 is gone", 5*time.Second, func() error {
		if got := keys(promote(true)); fmt.Sprint(got) != fmt.Sprint(want[:3]) {
			return fmt.Errorf("promoted snapshot holds %v", got)
		}
		return nil
	})
}

// TestPromoteReadFails: a stub that may not be read is a summary with an error naming it, never
// an absence.
func TestPromoteReadFails(t *testing.T) {
	tb := controlPlane(t)
	admin := kubetest.FastAdmin(t, tb)
	ns := kubetest.UniqueNS(t, "promote-denied")
	kubetest.CreateNamespaces(t, admin, ns)
	root := certs.NewCA(t)
	l := root.Leaf(t, certs.WithDNSNames("web.example"))
	kubetest.CreateSecret(t, admin, kubetest.TLSSecret(ns, "web", l.CertPEM, l.KeyPEM, root.CertPEM))
	// list and watch, but no get: the informers run, the reads by name are refused.
	const user = "promote-lister"
	grantSecretsReader(t, admin, ns, user)
	rc, err := tb.ClientConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	inv := startInventory(t, rc, Options{Namespaces: []string{ns}, Full: func(string, string) bool { return false }})
	waitSynced(t, inv)
	snap := inv.Promote(context.Background(), inv.Snapshot(), []string{ns}, nil, true)
	if len(snap.Secrets) != 1 || snap.Secrets[0].Err == nil || snap.Secrets[0].Key() != ns+"/web" {
		t.Fatalf("promoted %+v, want %s/web with an error", snap.Secrets, ns)
	}
	t.Logf("error: %v", snap.Secrets[0].Err)
}

// sameAsFull checks that every Secret of snap is summarized as the unsharded inventory full
// summarizes it: certificates, key facts, errors and the change record.
func sameAsFull(t *testing.T, snap kube.Snapshot, full *Inventory) {
	t.Helper()
	for _, s := range snap.Secrets {
		f := stubOrSummary(full, s.Namespace, s.Name)
		if s.Stub || f == nil {
			t.Errorf("%s: stub %v, in the full inventory %v", s.Key(), s.Stub, f != nil)
			continue
		}
		if got, want := describe(s), describe(f); got != want {
			t.Errorf("%s promoted:\n  %s\nunsharded:\n  %s", s.Key(), got, want)
		}
		// Both inventories saw the same events: an observed change is dated by each when it
		// arrived there, milliseconds apart.
		if d := s.ChangedAt.Sub(f.ChangedAt); s.ChangedHow != f.ChangedHow || s.ChangedBy != f.ChangedBy || d > 500*time.Millisecond || d < -500*time.Millisecond {
			t.Errorf("%s changed %v by %q (%s), unsharded %v by %q (%s)", s.Key(), s.ChangedAt, s.ChangedBy, s.ChangedHow, f.ChangedAt, f.ChangedBy, f.ChangedHow)
		}
	}
}

// describe is what a summary says of its certificates.
func describe(s *kube.SecretSummary) string {
	out := fmt.Sprintf("rv=%s err=%v", s.ResourceVersion, s.Err)
	for _, it := range s.Items {
		out += fmt.Sprintf(" item{%s %s %s %s chainErr=%v keyErr=%v caErr=%v", it.Name, it.CertKey, it.KeyKey, it.CAKey, it.ChainErr, it.KeyErr, it.CAErr)
		for _, c := range it.Chain {
			out += " cert=" + c.Fingerprint()[:12]
		}
		if it.Key != nil {
			out += fmt.Sprintf(" key=%s/%s/%v", it.Key.Algorithm, it.Key.Format, it.Key.Matches)
		}
		if it.CA != nil {
			out += fmt.Sprintf(" ca=%d", len(it.CA.Certs))
		}
		out += "}"
	}
	return out
}

// stubOrSummary is what inv's store holds for a Secret, stub or not; nil when nothing.
func stubOrSummary(inv *Inventory, ns, name string) *kube.SecretSummary {
	for _, s := range inv.sources {
		if s.Kind != "Secret" {
			continue
		}
		if obj, ok, _ := s.Informer.GetStore().GetByKey(ns + "/" + name); ok {
			return obj.(*secretEntry).Summary
		}
	}
	return nil
}

func keys(snap kube.Snapshot) []string {
	var out []string
	for _, s := range snap.Secrets {
		out = append(out, s.Key())
	}
	return out
}
