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

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/remediate"
)

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
			r := reloadFlags{Reload: true, Repair: remediate.Policy{Budget: 1, Timeout: time.Minute, LeaseNamespace: tc.flag}}
			err := r.validate()
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("%s: validate() = %v, want an error naming %q", tc.reason, err, tc.wantErr)
				}
			case err != nil:
				t.Errorf("%s: validate() = %v", tc.reason, err)
			case r.Repair.LeaseNamespace != tc.want:
				t.Errorf("%s: lease namespace %q, want %q", tc.reason, r.Repair.LeaseNamespace, tc.want)
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

// TestRepairFlags: audit --reload and serve --remediate share one repair policy under one flag
// prefix (--reload-*, CERTDRIFT_RELOAD_*), with each command's defaults; serve's former
// --remediate-* names and CERTDRIFT_REMEDIATE_* variables still set the same fields.
func TestRepairFlags(t *testing.T) {
	cases := map[string]struct {
		reason string
		args   []string
		env    map[string]string
		want   func(*cli) remediate.Policy
	}{
		"AuditDefaults": {reason: "audit: 5 actions per run", args: []string{"audit", "--config", "x.yaml"},
			want: func(c *cli) remediate.Policy { return c.Audit.Repair }},
		"ServeDefaults": {reason: "serve: 1 action per round", args: []string{"serve", "--config", "x.yaml"},
			want: func(c *cli) remediate.Policy { return c.Serve.Repair }},
		"ServeNewNames": {reason: "serve takes the shared names",
			args: []string{"serve", "--config", "x.yaml", "--reload-budget", "3", "--reload-cooldown", "1m", "--reload-strategy", "admin-quit",
				"--reload-timeout", "2m", "--reload-refusal-wait", "4s", "--reload-drain-wait", "6s", "--reload-lease-namespace", "ops"},
			want: func(c *cli) remediate.Policy { return c.Serve.Repair }},
		"ServeOldNames": {reason: "the former serve flags still work",
			args: []string{"serve", "--config", "x.yaml", "--remediate-budget", "3", "--remediate-cooldown", "1m", "--remediate-strategy", "admin-quit",
				"--remediate-timeout", "2m", "--remediate-refusal-wait", "4s", "--remediate-drain-wait", "6s", "--remediate-lease-namespace", "ops"},
			want: func(c *cli) remediate.Policy { return c.Serve.Repair }},
		"ServeOldEnv": {reason: "the former serve variables still work", args: []string{"serve", "--config", "x.yaml"},
			env: map[string]string{"CERTDRIFT_REMEDIATE_BUDGET": "3", "CERTDRIFT_REMEDIATE_COOLDOWN": "1m", "CERTDRIFT_REMEDIATE_STRATEGY": "admin-quit",
				"CERTDRIFT_REMEDIATE_TIMEOUT": "2m", "CERTDRIFT_REMEDIATE_REFUSAL_WAIT": "4s", "CERTDRIFT_REMEDIATE_DRAIN_WAIT": "6s",
				"CERTDRIFT_REMEDIATE_LEASE_NAMESPACE": "ops"},
			want: func(c *cli) remediate.Policy { return c.Serve.Repair }},
		"AuditEnv": {reason: "audit reads CERTDRIFT_RELOAD_*", args: []string{"audit", "--config", "x.yaml"},
			env: map[string]string{"CERTDRIFT_RELOAD_BUDGET": "3", "CERTDRIFT_RELOAD_COOLDOWN": "1m", "CERTDRIFT_RELOAD_STRATEGY": "admin-quit",
				"CERTDRIFT_RELOAD_TIMEOUT": "2m", "CERTDRIFT_RELOAD_REFUSAL_WAIT": "4s", "CERTDRIFT_RELOAD_DRAIN_WAIT": "6s",
				"CERTDRIFT_RELOAD_LEASE_NAMESPACE": "ops"},
			want: func(c *cli) remediate.Policy { return c.Audit.Repair }},
	}
	set := remediate.Policy{Strategy: "admin-quit", Budget: 3, Cooldown: time.Minute, Timeout: 2 * time.Minute,
		RefusalWait: 4 * time.Second, DrainWait: 6 * time.Second, LeaseNamespace: "ops"}
	wants := map[string]remediate.Policy{
		"AuditDefaults": {Budget: 5, Cooldown: 10 * time.Minute, Timeout: 3 * time.Minute, RefusalWait: 30 * time.Second, DrainWait: 5 * time.Second, LeaseNamespace: "certdrift"},
		"ServeDefaults": {Budget: 1, Cooldown: 10 * time.Minute, Timeout: 3 * time.Minute, RefusalWait: 30 * time.Second, DrainWait: 5 * time.Second},
		"ServeNewNames": set, "ServeOldNames": set, "ServeOldEnv": set, "AuditEnv": set,
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var c cli
			parser, err := kong.New(&c, kong.Name("certdrift"), kong.Exit(func(int) { t.Fatal("kong exited") }))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := parser.Parse(tc.args); err != nil {
				t.Fatalf("%s: %v", tc.reason, err)
			}
			if diff := cmp.Diff(wants[name], tc.want(&c)); diff != "" {
				t.Errorf("%s: policy -want +got:\n%s", tc.reason, diff)
			}
		})
	}
	// serve has no exec strategy: a local command is for Envoys outside Kubernetes.
	var c cli
	parser, err := kong.New(&c, kong.Name("certdrift"), kong.Exit(func(int) { t.Fatal("kong exited") }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parser.Parse([]string{"serve", "--config", "x.yaml", "--reload-strategy", "exec"}); err == nil {
		t.Error("serve accepted --reload-strategy exec")
	}
}
