package main

import (
	"crypto/x509"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/ref"
	"github.com/certdrift/certdrift/test/certs"
)

func TestKubeUsageErrors(t *testing.T) {
	cfg := writeConfig(t, "desired: [{name: a, dir: /nonexistent}]\n")
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A cluster that is never contacted: option errors come before any request.
	served := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(served, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		reason string
		args   []string
		want   string // in stderr
	}{
		"Neither":              {reason: "one of --config or --kubeconfig is required", args: []string{"audit"}, want: "--kubeconfig"},
		"LocalConfigInCluster": {reason: "with --kubeconfig the file may hold only pairings and policy", args: []string{"audit", "--config", cfg, "--kubeconfig", kc}, want: "only pairings and policy"},
		"CheckWithoutFile":     {reason: "--config.check needs a config file", args: []string{"audit", "--config.check", "--kubeconfig", kc}, want: "--config.check"},
		"BadAdminAccess":       {reason: "--admin-access is a closed set", args: []string{"audit", "--kubeconfig", kc, "--admin-access", "ssh"}, want: "ssh"},
		"NegativeGrace":        {reason: "--grace must not be negative", args: []string{"audit", "--kubeconfig", kc, "--grace", "-1s"}, want: "--grace"},
		"MissingKubeconfig": {reason: "a kubeconfig that does not exist cannot run",
			args: []string{"audit", "--kubeconfig", filepath.Join(t.TempDir(), "nope")}, want: "nope"},
		"NoCluster": {reason: "a kubeconfig without a cluster cannot run", args: []string{"audit", "--kubeconfig", kc}, want: "kubeconfig"},
		"UnknownContext": {reason: "a context the kubeconfig lacks cannot run",
			args: []string{"audit", "--kubeconfig", served, "--context", "elsewhere"}, want: "elsewhere"},
		"BadNamespace": {reason: "a namespace must be a DNS label",
			args: []string{"audit", "--kubeconfig", served, "--namespace", "Not_A_Label"}, want: "Not_A_Label"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := certdrift(t, nil, tc.args...)
			if r.code != codeNoRun {
				t.Fatalf("%s: want exit %d\n%s", tc.reason, codeNoRun, r)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("%s: stderr does not mention %q\n%s", tc.reason, tc.want, r)
			}
		})
	}
}

// TestKubeAuditStaysInNamespace: the same host name served in two namespaces from two Secrets.
// Each pod holds its own namespace's current certificate, so nothing is stale. Once b's pod holds
// a certificate no Secret has now, the audit's name-based inference would, without the pod
// context, also pair it with a's Secret (the control below); with it, b's pod is judged against
// b's Secret alone. (A pod holding some Secret's current certificate is never inferred to hold an
// old copy of another: audit's NotInferredFromASibling.)
func TestKubeAuditStaysInNamespace(t *testing.T) {
	now := time.Now()
	ca := certs.NewCA(t)
	leaves := map[string]*certs.Leaf{
		"a": ca.Leaf(t, certs.WithDNSNames("web.example.com")),
		"b": ca.Leaf(t, certs.WithDNSNames("web.example.com")),
	}
	var in audit.Inputs
	for _, ns := range []string{"a", "b"} {
		c := leaves[ns].Cert
		in.Desired = append(in.Desired, desired.Observation{
			Ref:       ref.Source{Kind: ref.Secret, Namespace: ns, Name: "web-tls"},
			ChangedAt: now.Add(-time.Hour),
			Items:     []desired.Item{{CertPath: ns + "/web-tls/tls.crt", Chain: []*x509.Certificate{c}}},
		})
		e := config.Envoy{Name: ns + "/envoy-0", Bindings: []config.Binding{{Source: ns + "/web-tls", File: "/certs/tls.crt"}}}
		in.Envoys = append(in.Envoys, audit.EnvoyView{Config: e, Pod: &audit.PodContext{Namespace: ns, Pod: "envoy-0"}, Admin: &envoystate.Snapshot{
			CollectedAt: now,
			Contexts: []envoystate.TLSContext{{Chain: []envoystate.CertDetail{{
				Path: "/certs/tls.crt", Serial: c.SerialNumber, SerialText: c.SerialNumber.Text(16),
				DNSNames: c.DNSNames, ValidFrom: c.NotBefore, Expiration: c.NotAfter,
			}}}},
		}})
	}
	policy := config.DefaultPolicy
	r := audit.Run(in, policy, now)
	for _, f := range r.Findings {
		t.Errorf("unexpected finding %s on %q (source %q): %s", f.Code, f.Subject.Envoy, f.Subject.Source, f.Message)
	}
	for _, b := range r.Bindings {
		if ns, _, _ := strings.Cut(b.Envoy, "/"); !strings.HasPrefix(b.Source, ns+"/") {
			t.Errorf("envoy %s bound to %s of another namespace (origin %s)", b.Envoy, b.Source, b.Origin)
		}
	}
	want := audit.Summary{DesiredSources: 2, Envoys: 2, Bindings: len(r.Bindings), Handshakes: 0, Findings: map[string]int{},
		Coverage: audit.Coverage{BindingsJudged: len(r.Bindings), Bindings: len(r.Bindings), Complete: true}}
	if diff := cmp.Diff(want, r.Summary); diff != "" {
		t.Errorf("summary: -want +got:\n%s", diff)
	}
	if len(r.Bindings) != 2 {
		t.Errorf("got %d bindings, want one per pod: %+v", len(r.Bindings), r.Bindings)
	}

	// A stale pod in one namespace is still found.
	in.Envoys[1].Admin.Contexts[0].Chain[0].Serial = big.NewInt(42)
	// Name-based inference applies to a leaf no mount binding accounts for (a mounted Secret's
	// leaf is that Secret's: audit's NotInferredWhenBound), so the scoping is shown on pods whose
	// mounts are unknown. The control: without the pod context, inference pairs b's stale
	// certificate with a's Secret too; with it, with b's alone.
	crossings := func(withPod bool) int {
		evs := slices.Clone(in.Envoys)
		for i := range evs {
			evs[i].Config.Bindings = nil
			if !withPod {
				evs[i].Pod = nil
			}
		}
		cross := 0
		for _, b := range audit.Run(audit.Inputs{Desired: in.Desired, Envoys: evs}, policy, now).Bindings {
			if ns, _, _ := strings.Cut(b.Envoy, "/"); !strings.HasPrefix(b.Source, ns+"/") {
				cross++
			}
		}
		return cross
	}
	if crossings(false) == 0 {
		t.Errorf("without pod context no binding crossed namespaces: the case no longer shows what scoping prevents")
	}
	if n := crossings(true); n != 0 {
		t.Errorf("with pod context and no mount bindings, %d bindings crossed namespaces", n)
	}
	r = audit.Run(in, policy, now)
	for _, b := range r.Bindings {
		if ns, _, _ := strings.Cut(b.Envoy, "/"); !strings.HasPrefix(b.Source, ns+"/") {
			t.Errorf("with b stale, envoy %s bound to %s of another namespace (origin %s)", b.Envoy, b.Source, b.Origin)
		}
	}
	var codes []string
	for _, f := range r.Findings {
		codes = append(codes, string(f.Code)+" "+f.Subject.Envoy+" "+f.Subject.Source)
	}
	if diff := cmp.Diff([]string{"STALE_LOADED b/envoy-0 b/web-tls"}, codes); diff != "" {
		t.Errorf("findings with b stale: -want +got:\n%s", diff)
	}
}
