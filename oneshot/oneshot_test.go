package oneshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/gather"
	"github.com/certdrift/certdrift/remediate"
	"github.com/certdrift/certdrift/test/atomicdir"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
)

func writeFile(t *testing.T, path, body string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGatherReadsTheFileFirst: a bad configuration file stops the round before the cluster is
// asked for anything, each Kubernetes step's error stops the next, and the gather options the
// cluster's are built from carry the policy after the command's flags.
func TestGatherReadsTheFileFirst(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, filepath.Join(dir, "bad.yaml"), "pairings: [{name: x, bundle: {sorce: a/b}}]\n")
	local := writeFile(t, filepath.Join(dir, "local.yaml"), "desired: [{name: web, dir: /nonexistent}]\n")
	cluster := writeFile(t, filepath.Join(dir, "cluster.yaml"), "policy: {timeout: 7s}\n")
	flags := func(p config.Policy) config.Policy { p.Grace = config.Duration(42 * time.Second); return p }
	errOptions, errREST := errors.New("options refused"), errors.New("no cluster here")

	cases := map[string]struct {
		reason      string
		config      string
		optionsErr  error
		restErr     error
		wantErr     []string // each in the error
		wantCalls   string   // Kube's steps called, in order
		wantTimeout time.Duration
	}{
		"BadFile": {reason: "a bad file is reported before the cluster is asked", config: bad,
			wantErr: []string{"bad.yaml", "sorce"}},
		"LocalFileInClusterMode": {reason: "the Kubernetes mode's file holds only pairings and policy", config: local,
			wantErr: []string{"only pairings and policy"}},
		"OptionsRefused": {reason: "the gather options are built from the file's policy and the flags; their error stops the round",
			config: cluster, optionsErr: errOptions, wantErr: []string{"options refused"}, wantCalls: "options", wantTimeout: 7 * time.Second},
		"NoCluster": {reason: "the REST config comes after the options", config: cluster, restErr: errREST,
			wantErr: []string{"no cluster here"}, wantCalls: "options rest", wantTimeout: 7 * time.Second},
		"NoFile": {reason: "without a file the defaults' timeout", restErr: errREST,
			wantErr: []string{"no cluster here"}, wantCalls: "options rest", wantTimeout: config.DefaultPolicy.Timeout.D()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var calls []string
			var got gather.Options
			kube := &Kube{
				Options: func(g gather.Options) (gather.KubeOptions, error) {
					calls = append(calls, "options")
					got = g
					return gather.KubeOptions{Options: g}, tc.optionsErr
				},
				REST: func() (*rest.Config, error) {
					calls = append(calls, "rest")
					return nil, tc.restErr
				},
			}
			log := slog.New(slog.DiscardHandler)
			o := Options{Config: tc.config, Kube: kube, Policy: flags, Concurrency: 3, Log: log}
			for what, run := range map[string]func() error{
				"Gather":    func() error { _, err := Gather(context.Background(), o); return err },
				"Inventory": func() error { return Inventory(context.Background(), o, io.Discard) },
			} {
				calls = nil
				err := run()
				if err == nil {
					t.Fatalf("%s: %s succeeded", tc.reason, what)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: %s error %q lacks %q", tc.reason, what, err, w)
					}
				}
				if g := strings.Join(calls, " "); g != tc.wantCalls {
					t.Errorf("%s: %s called %q, want %q", tc.reason, what, g, tc.wantCalls)
				}
				if tc.wantCalls != "" && (got.Timeout != tc.wantTimeout || got.Concurrency != 3 || got.Log != log) {
					t.Errorf("%s: %s built the cluster's options from %+v, want timeout %s, concurrency 3 and the log", tc.reason, what, got, tc.wantTimeout)
				}
			}
		})
	}
	if err := Inventory(context.Background(), Options{Config: local}, io.Discard); err == nil {
		t.Error("Inventory ran in local mode")
	}
}

// TestRepairNeedsTheKeptSession: a Kubernetes round gathered without KeepSession can plan (a
// dry run) but not act, since the post-checks would have no session to observe through.
func TestRepairNeedsTheKeptSession(t *testing.T) {
	r := &Round{rest: &rest.Config{Host: "https://127.0.0.1:1"}, Policy: config.DefaultPolicy}
	_, err := r.Repair(context.Background(), audit.Report{}, Repair{Policy: remediate.Policy{Budget: 1, Timeout: time.Second}, Log: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "KeepSession") {
		t.Fatalf("Repair without the kept session: %v, want an error naming KeepSession", err)
	}
}

// TestLocalRoundAndRepair runs `audit --reload` outside Kubernetes through this package against
// a real Envoy whose SDS file still names the old certificate after the desired directory
// rotated: the round judges it stale, the dry run plans the exec strategy and changes nothing,
// a command that fixes nothing fails its post-check (which reads the Envoy again), and a command
// that moves the new SDS file into place is done, the post-check seeing the new leaf served.
func TestLocalRoundAndRepair(t *testing.T) {
	const host = "web.example.com"
	ca := certs.NewCA(t)
	v1 := ca.Leaf(t, certs.WithCommonName("v1"), certs.WithDNSNames(host), certs.WithFreshKey())
	v2 := ca.Leaf(t, certs.WithCommonName("v2"), certs.WithDNSNames(host), certs.WithFreshKey())
	dir := t.TempDir()
	files := func(name string, l *certs.Leaf) (string, string) {
		sub := filepath.Join(dir, name)
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		certs.WriteFiles(t, sub, map[string][]byte{"tls.crt": l.CertPEM, "tls.key": l.KeyPEM})
		return filepath.Join(sub, "tls.crt"), filepath.Join(sub, "tls.key")
	}
	c1, k1 := files("v1", v1)
	c2, k2 := files("v2", v2)
	sds := filepath.Join(dir, "sds", "web.json")
	if err := os.MkdirAll(filepath.Dir(sds), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sds, envoytest.TLSSecret("web", c1, k1, ""), 0o600); err != nil {
		t.Fatal(err)
	}
	staged := filepath.Join(filepath.Dir(sds), "web.next")
	if err := os.WriteFile(staged, envoytest.TLSSecret("web", c2, k2, ""), 0o600); err != nil {
		t.Fatal(err)
	}
	e := envoytest.Start(t, envoytest.Config{Bootstrap: envoytest.Bootstrap(envoytest.Listener{
		Chains: []envoytest.Chain{{ServerNames: []string{host}, SDS: &envoytest.SDSRef{Name: "web", Path: sds}}}})})
	addr := e.ListenerAddr(t, "https")

	secretDir := filepath.Join(dir, "secret")
	if err := os.MkdirAll(secretDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := atomicdir.Write(secretDir, map[string][]byte{"tls.crt": v2.CertPEM, "tls.key": v2.KeyPEM}); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, filepath.Join(dir, "certdrift.yaml"), fmt.Sprintf(`desired:
  - name: web
    dir: %s
envoys:
  - name: edge
    admin: %s
    endpoints:
      - address: %s
        sni: [%s]
        source: web
`, secretDir, e.AdminURL, addr, host))
	time.Sleep(50 * time.Millisecond) // past the grace below
	log := slog.New(slog.DiscardHandler)
	o := Options{Config: cfg, Concurrency: 2, Log: log,
		Policy: func(p config.Policy) config.Policy { p.Grace = config.Duration(10 * time.Millisecond); return p }}
	r, err := Gather(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Policy.Grace.D() != 10*time.Millisecond || r.Config == nil || len(r.Config.Envoys) != 1 {
		t.Fatalf("round policy %+v and config %+v: want the file's with the flags' grace", r.Policy, r.Config)
	}
	report := audit.Run(r.Inputs, r.Policy, time.Now())
	stale := map[audit.Code]bool{}
	for _, f := range report.Findings {
		stale[f.Code] = true
	}
	if !stale[audit.StaleServed] {
		t.Fatalf("the Envoy serving v1 after the rotation to v2 is not STALE_SERVED: %v", stale)
	}

	policy := remediate.Policy{Strategy: string(remediate.Exec), Budget: 5, Timeout: 20 * time.Second}
	repair := func(dryRun bool, command ...string) remediate.Result {
		t.Helper()
		results, err := r.Repair(context.Background(), report, Repair{Policy: policy, Command: command, DryRun: dryRun, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		if len(results) != 1 || results[0].Strategy != remediate.Exec || results[0].Target.Envoy != "edge" {
			t.Fatalf("repair results %+v: want one exec action on edge", results)
		}
		return results[0]
	}
	if res := repair(true, "mv", staged, sds); res.Outcome != remediate.OutcomePlanned {
		t.Errorf("dry run: outcome %s (%s), want planned", res.Outcome, res.Detail)
	}
	if _, err := os.Stat(staged); err != nil {
		t.Fatalf("the dry run ran the command: %v", err)
	}
	policy.Timeout = 3 * time.Second // the post-check of a command that fixes nothing waits this long
	if res := repair(false, "true"); res.Outcome != remediate.OutcomeFailed {
		t.Errorf("a command that fixes nothing: outcome %s (%s), want failed by the post-check", res.Outcome, res.Detail)
	}
	policy.Timeout = 60 * time.Second
	res := repair(false, "mv", staged, sds)
	if res.Outcome != remediate.OutcomeDone || !strings.Contains(res.Detail, "web") {
		t.Fatalf("moving the new SDS file into place: outcome %s (%s), want done with the post-check naming web\nenvoy log:\n%s", res.Outcome, res.Detail, e.Logs())
	}
	r2, err := Gather(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if after := audit.Run(r2.Inputs, r2.Policy, time.Now()); len(after.Findings) != 0 {
		t.Errorf("after the repair: %d findings, want none: %+v", len(after.Findings), after.Findings)
	}
}
