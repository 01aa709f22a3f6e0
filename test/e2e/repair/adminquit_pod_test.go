package repair

import (
	"context"
	"testing"
	"time"

	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/testbed"
)

// TestAdminQuitOnPod: admin-quit on testbed pods. The static-tls Envoys are stale after a
// rotation; `--reload --yes --reload-strategy admin-quit` drains and quits each one in turn, the
// node agent restarts the container as the kubelet does (restartPolicy Always), the new process
// reads the rotated files, the post-check sees the desired leaf, and the next audit is clean. The
// pods themselves stay: same names and UIDs, one restart each.
func TestAdminQuitOnPod(t *testing.T) {
	tb := testbed.StartT(t, testbed.Options{VolumeSyncDelay: syncDelay})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ca := certs.NewCA(t, certs.WithCommonName("e2e-adminquit-ca"))
	v1 := ca.Leaf(t, certs.WithCommonName(webHost), certs.WithDNSNames(webHost))
	v2 := ca.Leaf(t, certs.WithCommonName(webHost), certs.WithDNSNames(webHost))
	keys := [][]byte{v1.KeyPEM, v2.KeyPEM}
	deploy(ctx, t, tb, "static-tls", v1)
	rotate(ctx, t, tb, "static-tls", v2)
	before := uids(ready(ctx, t, tb, "static-tls"))

	r := audit(t, tb, keys, "--reload", "--yes", "--reload-strategy", "admin-quit", "--reload-cooldown", "0s")
	wantOutcomes(t, "admin-quit", r, "admin-quit done", "admin-quit done")

	after := ready(ctx, t, tb, "static-tls")
	if got := uids(after); !mapsEqual(got, before) {
		t.Errorf("admin-quit replaced pods: before %v, after %v; it must restart the container in place", before, got)
	}
	for _, p := range after {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == "envoy" && cs.RestartCount != 1 {
				t.Errorf("pod %s container envoy restartCount %d, want 1", p.Name, cs.RestartCount)
			}
		}
	}
	if r := audit(t, tb, keys); r.code != 0 || len(r.findings) != 0 {
		t.Errorf("audit after admin-quit: exit %d, %d findings, want 0 and none\n%s", r.code, len(r.findings), r.out)
	}
}
