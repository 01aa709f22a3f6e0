package main

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/files"
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
		"Neither":          {reason: "one of --config or --kubeconfig is required", args: []string{"audit"}, want: "--kubeconfig"},
		"Both":             {reason: "the two modes are exclusive", args: []string{"audit", "--config", cfg, "--kubeconfig", kc}, want: "exclusive"},
		"CheckWithoutFile": {reason: "--config.check needs a config file", args: []string{"audit", "--config.check", "--kubeconfig", kc}, want: "--config.check"},
		"BadAdminAccess":   {reason: "--admin-access is a closed set", args: []string{"audit", "--kubeconfig", kc, "--admin-access", "ssh"}, want: "ssh"},
		"NegativeGrace":    {reason: "--grace must not be negative", args: []string{"audit", "--kubeconfig", kc, "--grace", "-1s"}, want: "--grace"},
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

func TestFillSNIs(t *testing.T) {
	names := desiredNames([]files.Observation{
		{Source: files.Source{Name: "a/web"}, Items: []files.Item{{Chain: []*x509.Certificate{{DNSNames: []string{"web.example", "*.web.example", "alt.example"}}}}}},
		{Source: files.Source{Name: "a/other"}, Items: []files.Item{{Chain: []*x509.Certificate{{DNSNames: []string{"other.example"}}}}}},
		{Source: files.Source{Name: "a/broken"}, Items: []files.Item{{}}},
	})
	tests := map[string]struct {
		reason   string
		eps      []config.Endpoint
		bindings []config.Binding
		want     []config.Endpoint
	}{
		"FromBoundSecret": {
			reason:   "an endpoint without SNIs gets the exact DNS names of the pod's bound Secrets",
			eps:      []config.Endpoint{{Address: "10.0.0.1:8443"}},
			bindings: []config.Binding{{Source: "a/web"}, {Source: "a/broken"}},
			want:     []config.Endpoint{{Address: "10.0.0.1:8443", SNI: []string{"web.example", "alt.example"}}},
		},
		"KeepsDeclared": {
			reason:   "SNIs from annotations or listeners are kept",
			eps:      []config.Endpoint{{Address: "10.0.0.1:8443", SNI: []string{"x.example"}}},
			bindings: []config.Binding{{Source: "a/web"}},
			want:     []config.Endpoint{{Address: "10.0.0.1:8443", SNI: []string{"x.example"}}},
		},
		"NothingBound": {
			reason: "no binding: one handshake without SNI",
			eps:    []config.Endpoint{{Address: "10.0.0.1:8443"}},
			want:   []config.Endpoint{{Address: "10.0.0.1:8443"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fillSNIs(tc.eps, tc.bindings, names)
			if diff := cmp.Diff(tc.want, tc.eps, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}
