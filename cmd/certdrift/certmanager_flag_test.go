package main

import (
	"testing"

	"github.com/certdrift/certdrift/gather"
)

// TestNoCertManagerFlag: reading cert-manager is on unless --no-cert-manager (or its variable)
// turns it off.
func TestNoCertManagerFlag(t *testing.T) {
	kc := writeKubeconfig(t)
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want bool
	}{
		"Default": {},
		"Flag":    {args: []string{"--no-cert-manager"}, want: true},
		"Env":     {env: map[string]string{"CERTDRIFT_NO_CERT_MANAGER": "true"}, want: true},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := parseAudit(t, tc.env, append([]string{"--kubeconfig", kc}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			opts, err := c.kubeFlags.options(gather.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if opts.NoCertManager != tc.want {
				t.Errorf("NoCertManager = %v, want %v", opts.NoCertManager, tc.want)
			}
		})
	}
}
