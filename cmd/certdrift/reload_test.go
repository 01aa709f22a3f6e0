package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/files"
	"github.com/certdrift/certdrift/probe/tlsprobe"
	"github.com/certdrift/certdrift/test/certs"
)

// TestCheckConverged pins the post-check: a replacement passes only when it was observed, every
// binding is converged, no stale finding names it, and each handshake returns the desired leaf.
func TestCheckConverged(t *testing.T) {
	ca := certs.NewCA(t)
	want, old := ca.Leaf(t, certs.WithDNSNames("web.example.com")), ca.Leaf(t, certs.WithDNSNames("web.example.com"))
	desired := []files.Observation{{Source: files.Source{Name: "ns/web-tls"}, Items: []files.Item{{Chain: want.Chain()}}}}
	view := func(leaf *certs.Leaf) audit.EnvoyView {
		r := tlsprobe.Result{Target: tlsprobe.Target{Address: "10.0.0.9:8443"}}
		if leaf != nil {
			r.Chain = leaf.Chain()
		}
		return audit.EnvoyView{Config: config.Envoy{Name: "ns/web-new"}, Served: []tlsprobe.Result{r}}
	}
	converged := []audit.Binding{{Envoy: "ns/web-new", Source: "ns/web-tls", State: audit.StateConverged}}
	cases := map[string]struct {
		reason   string
		envoys   []audit.EnvoyView
		bindings []audit.Binding
		findings []audit.Finding
		wantErr  string
	}{
		"Converged":       {reason: "serves the desired leaf", envoys: []audit.EnvoyView{view(want)}, bindings: converged},
		"NotObserved":     {reason: "not discovered yet", bindings: converged, wantErr: "not observed"},
		"NoBinding":       {reason: "admin not read yet", envoys: []audit.EnvoyView{view(want)}, wantErr: "no certificate binding"},
		"ServesOldLeaf":   {reason: "the handshake returns the old leaf", envoys: []audit.EnvoyView{view(old)}, bindings: converged, wantErr: "not the desired certificate"},
		"HandshakeFailed": {reason: "no chain received", envoys: []audit.EnvoyView{view(nil)}, bindings: converged, wantErr: "handshake"},
		"StaleFinding": {reason: "the audit still finds it stale", envoys: []audit.EnvoyView{view(want)}, bindings: converged,
			findings: []audit.Finding{{Code: audit.StaleLoaded, Subject: audit.Subject{Envoy: "ns/web-new"}}}, wantErr: "STALE_LOADED"},
		"Converging": {reason: "a binding not yet converged", envoys: []audit.EnvoyView{view(want)},
			bindings: []audit.Binding{{Envoy: "ns/web-new", Source: "ns/web-tls", State: audit.StateConverging}}, wantErr: "converging"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			saw, err := checkConverged(audit.Inputs{Desired: desired, Envoys: tc.envoys},
				audit.Report{Bindings: tc.bindings, Findings: tc.findings}, []string{"ns/web-new"})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("%s: unexpected error %v", tc.reason, err)
			case tc.wantErr == "" && !strings.Contains(saw, "serves the desired leaf of ns/web-tls"):
				t.Errorf("%s: saw %q", tc.reason, saw)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("%s: err %v, want one mentioning %q", tc.reason, err, tc.wantErr)
			}
		})
	}
}

// TestReloadLeaseNamespace: audit --reload keeps its records where serve --remediate does:
// the flag, else the pod's namespace (an audit run as a Job), else certdrift (the namespace the
// kustomize base and docs/operate.md install into). A value that cannot name a namespace is
// refused before anything runs.
func TestReloadLeaseNamespace(t *testing.T) {
	cases := map[string]struct {
		reason, flag, podNS, want, wantErr string
	}{
		"Flag":      {reason: "the flag wins", flag: "ops", podNS: "certdrift-a", want: "ops"},
		"PodNS":     {reason: "run in a pod: its namespace", podNS: "certdrift-a", want: "certdrift-a"},
		"Default":   {reason: "from a laptop: the install's namespace", want: "certdrift"},
		"NotAName":  {reason: "not a namespace", flag: "Certdrift_NS", wantErr: "--reload-lease-namespace"},
		"NotALabel": {reason: "namespaces hold no dots", flag: "a.b", wantErr: "not a namespace name"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", tc.podNS)
			r := reloadFlags{Reload: true, ReloadBudget: 1, ReloadTimeout: time.Minute, ReloadLeaseNamespace: tc.flag}
			err := r.validate()
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("%s: validate() = %v, want an error naming %q", tc.reason, err, tc.wantErr)
				}
			case err != nil:
				t.Errorf("%s: validate() = %v", tc.reason, err)
			case r.leaseNamespace() != tc.want:
				t.Errorf("%s: lease namespace %q, want %q", tc.reason, r.leaseNamespace(), tc.want)
			}
		})
	}
}

// TestKubeReloadKeepsConfigPolicy: in Kubernetes mode `audit --reload` judges its post-checks
// with the policy the audit used — the --config file's, with the flags over it — not
// config.DefaultPolicy (issue 17: the Kubernetes path rebuilt its policy from the defaults and
// dropped the file's).
func TestKubeReloadKeepsConfigPolicy(t *testing.T) {
	tb := bed.Get(t)
	cfg := writeConfig(t, "policy:\n  grace: 7m\n  timeout: 9s\n  min_rsa_bits: 3072\n")
	var c cli
	parser, err := kong.New(&c, kong.Name("certdrift"), kong.Exit(func(int) { t.Fatal("kong exited") }))
	if err != nil {
		t.Fatal(err)
	}
	// An empty namespace: nothing to repair, so the run reads the cluster and plans nothing.
	ns := "reload-policy-empty"
	if _, err := parser.Parse([]string{"audit", "--kubeconfig", tb.KubeconfigPath, "--config", cfg, "--namespace", ns,
		"--reload", "--grace", "3m"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = c.Audit.Run(context.Background(), &streams{Out: &out, Err: &out}, slog.New(slog.DiscardHandler))
	var ee *exitError
	if errors.As(err, &ee) && ee.code == exitNoRun {
		t.Fatalf("audit --reload could not run: %v\n%s", err, out.String())
	}
	want := config.DefaultPolicy
	want.Grace, want.Timeout, want.MinRSABits = config.Duration(3*time.Minute), config.Duration(9*time.Second), 3072
	st := c.Audit.reloadFlags.state
	if st == nil {
		t.Fatalf("audit --reload kept no state for the repair\n%s", out.String())
	}
	if diff := cmp.Diff(want, st.policy); diff != "" {
		t.Errorf("the repair's policy is not the audit's (--config, then --grace): -want +got:\n%s", diff)
	}
}
