package repair

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/proc"
	"github.com/certdrift/certdrift/test/testbed"
)

// exporter is one `certdrift serve --remediate` process.
type exporter struct {
	name string
	url  string
	cmd  *exec.Cmd
	logs *bytes.Buffer
}

func startServe(t *testing.T, tb *testbed.Testbed, name string, extra ...string) *exporter {
	t.Helper()
	addr := proc.FreeAddr(t)
	args := []string{"serve", "--kubeconfig", tb.KubeconfigPath, "--namespace", "static-tls", "--grace", grace.String(),
		"--interval", "2s", "--web.listen-address", addr,
		"--remediate", "--remediate-lease-namespace", serveLeaseNS, "--remediate-budget", "5",
		"--remediate-lease-duration", "6s", "--remediate-identity", name}
	args = append(args, extra...)
	cmd := exec.Command(certdriftBin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	logs := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	e := &exporter{name: name, url: "http://" + addr, cmd: cmd, logs: logs}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			// Rounds log twice each: keep what says what repair did.
			var keep []string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "remediate") || strings.Contains(l, "reload") || strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
					keep = append(keep, l)
				}
			}
			t.Logf("%s log (repair lines):\n%s", name, tailLines(strings.Join(keep, "\n"), 60))
		}
	})
	return e
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// actions reads certdrift_reload_actions_total from an exporter's /metrics: outcome → sum over
// strategies, and whether the family was there at all.
func (e *exporter) actions() (map[string]float64, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(e.url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	found := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "certdrift_reload_actions_total{") {
			continue
		}
		found = true
		i := strings.Index(line, `outcome="`)
		j := strings.LastIndex(line, " ")
		if i < 0 || j < 0 {
			return nil, fmt.Errorf("odd line %q", line)
		}
		outcome := line[i+len(`outcome="`):]
		outcome = outcome[:strings.Index(outcome, `"`)]
		v, err := strconv.ParseFloat(line[j+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		out[outcome] += v
	}
	if !found {
		return nil, fmt.Errorf("%s /metrics has no certdrift_reload_actions_total", e.name)
	}
	return out, nil
}

// TestServeRemediateOneLeader: two `certdrift serve --remediate` replicas after a rotation of
// the static-tls Secret. Exactly one acts: it evicts the two stale pods one at a time, the
// ReplicaSet replaces them, the replacements serve the new certificate and the audit is clean;
// the other replica's action counters stay 0.
func TestServeRemediateOneLeader(t *testing.T) {
	tb := testbed.StartT(t, testbed.Options{VolumeSyncDelay: syncDelay})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ca := certs.NewCA(t, certs.WithCommonName("e2e-remediate-ca"))
	leaf := func() *certs.Leaf { return ca.Leaf(t, certs.WithCommonName(webHost), certs.WithDNSNames(webHost)) }
	v1, v2 := leaf(), leaf()
	keys := [][]byte{v1.KeyPEM, v2.KeyPEM}
	deploy(ctx, t, tb, "static-tls", v1)

	// The rotation waits out the grace period: both pods are provably stale. The replicas start
	// after it, so the pods the test calls stale are the ones they find (started before, they
	// act within seconds of the grace period and race the test's bookkeeping).
	rotate(ctx, t, tb, "static-tls", v2)
	stale := uids(ready(ctx, t, tb, "static-tls"))
	a, b := startServe(t, tb, "replica-a"), startServe(t, tb, "replica-b")

	// Wait until no stale pod is left and two new ones are Ready.
	deadline := time.Now().Add(4 * time.Minute)
	var now map[string]string
	for {
		pods, err := tb.WaitPodsReady(ctx, "static-tls", "app=envoy")
		if err == nil {
			now = uids(pods)
			left := 0
			for k, u := range stale {
				if now[k] == u {
					left++
				}
			}
			if left == 0 && len(now) == 2 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("stale pods not replaced within 4 minutes: now %v, stale %v", now, stale)
		}
		time.Sleep(time.Second)
	}

	// The new pods serve v2: an independent audit is clean (retry: the last post-check and the
	// endpoints may need a moment).
	var r run
	for i := 0; i < 20; i++ {
		if r = audit(t, tb, keys); r.code == 0 && len(r.findings) == 0 {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if r.code != 0 || len(r.findings) != 0 {
		t.Fatalf("after serve --remediate: exit %d with %d findings, want a clean audit\n%s", r.code, len(r.findings), r.out)
	}

	// Exactly one replica acted: its counters show two done evictions, the other's are all 0.
	var ma, mb map[string]float64
	for i := 0; i < 20; i++ {
		var errA, errB error
		ma, errA = a.actions()
		mb, errB = b.actions()
		if errA == nil && errB == nil && ma["done"]+mb["done"] >= 2 {
			break
		}
		time.Sleep(time.Second)
	}
	t.Logf("OBSERVED actions: replica-a %v, replica-b %v", ma, mb)
	leader, follower, lm, fm := a, b, ma, mb
	if mb["done"] > 0 {
		leader, follower, lm, fm = b, a, mb, ma
	}
	if lm["done"] != 2 || lm["failed"] != 0 || lm["refused"] != 0 {
		t.Errorf("leader %s: actions %v, want done 2 and nothing failed or refused", leader.name, lm)
	}
	for outcome, v := range fm {
		if v != 0 {
			t.Errorf("follower %s counted %v %s actions, want every counter 0", follower.name, v, outcome)
		}
	}
	if evicted := evictedEvents(ctx, t, tb, "static-tls"); evicted != 2 {
		t.Errorf("%d CertdriftEvicted events, want 2 (one per stale pod, from one replica)", evicted)
	}
	l, err := tb.Client.CoordinationV1().Leases("default").Get(ctx, "certdrift-remediate", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("election lease: %v", err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != leader.name {
		t.Errorf("election lease held by %v, want the replica that acted (%s)", l.Spec.HolderIdentity, leader.name)
	}
}
