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
