package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"

	"github.com/certdrift/certdrift/ref"
)

// Validate checks references and required fields, returning every problem at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	sources := map[string]bool{}
	for i, d := range c.Desired {
		where := fmt.Sprintf("desired[%d]", i)
		if d.Name == "" {
			bad("%s.name is required", where)
		} else if sources[d.Name] {
			bad("%s.name %q is used twice", where, d.Name)
		}
		sources[d.Name] = true
		hasFile := d.CertFile != "" || d.KeyFile != "" || d.CAFile != ""
		switch {
		case d.Dir == "" && !hasFile:
			bad("%s (%s): set dir, or cert_file/key_file/ca_file", where, d.Name)
		case d.Dir != "" && hasFile:
			bad("%s (%s): dir and cert_file/key_file/ca_file are exclusive", where, d.Name)
		case d.Merged != nil && d.Dir == "":
			bad("%s (%s): merged needs dir", where, d.Name)
		}
	}
	ref := func(where, source string) {
		if source != "" && !sources[source] {
			bad("%s: source %q is not a desired source", where, source)
		}
	}
	names := map[string]bool{}
	for i, e := range c.Envoys {
		where := fmt.Sprintf("envoys[%d]", i)
		if e.Name == "" {
			bad("%s.name is required", where)
		} else if names[e.Name] {
			bad("%s.name %q is used twice", where, e.Name)
		}
		names[e.Name] = true
		if e.Admin == "" && len(e.Endpoints) == 0 {
			bad("%s (%s): set admin and/or endpoints", where, e.Name)
		}
		if e.Admin != "" {
			u, err := url.Parse(e.Admin)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad("%s.admin %q: want an http(s) URL such as http://127.0.0.1:9901", where, e.Admin)
			}
		}
		for j, ep := range e.Endpoints {
			w := fmt.Sprintf("%s.endpoints[%d]", where, j)
			if _, _, err := net.SplitHostPort(ep.Address); err != nil {
				bad("%s.address %q: want host:port", w, ep.Address)
			}
			ref(w, ep.Source)
			if cc := ep.ClientCert; cc != nil && (cc.CertFile == "" || cc.KeyFile == "") {
				bad("%s.client_cert needs cert_file and key_file", w)
			}
		}
		for j, b := range e.Bindings {
			w := fmt.Sprintf("%s.bindings[%d]", where, j)
			if b.Source == "" {
				bad("%s.source is required", w)
			}
			ref(w, b.Source)
			if b.Secret == "" && b.File == "" {
				bad("%s: set secret (SDS name) or file (certificate path)", w)
			}
		}
	}
	for i, p := range c.Pairings {
		w := fmt.Sprintf("pairings[%d]", i)
		if p.Bundle.Source == "" || p.Leaf.Source == "" {
			bad("%s: bundle.source and leaf.source are required", w)
		}
		ref(w+".bundle", p.Bundle.Source)
		ref(w+".leaf", p.Leaf.Source)
	}
	errs = append(errs, c.Policy.validate()...)
	return errors.Join(errs...)
}

// ValidateCluster checks a Kubernetes-mode configuration: only pairings and policy.
func (c *Config) ValidateCluster() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if len(c.Desired) > 0 || len(c.Envoys) > 0 {
		bad("desired and envoys are not used with --kubeconfig: the cluster's Secrets and pods are; keep only pairings and policy")
	}
	for i, p := range c.Pairings {
		for _, r := range []struct{ where, source string }{{"bundle", p.Bundle.Source}, {"leaf", p.Leaf.Source}} {
			if _, ok := ref.ParseKube(r.source); !ok {
				bad("pairings[%d].%s.source %q: want namespace/name of a Secret (or configmap:namespace/name)", i, r.where, r.source)
			}
		}
	}
	errs = append(errs, c.Policy.validate()...)
	return errors.Join(errs...)
}

func (p Policy) validate() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if p.ExpiringCritical > p.ExpiringWarning {
		bad("policy.expiring_critical (%s) is longer than policy.expiring_warning (%s)",
			p.ExpiringCritical.D(), p.ExpiringWarning.D())
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"expiring_warning_lifetime_percent", p.ExpiringWarningLifetimePercent}, {"expiring_critical_lifetime_percent", p.ExpiringCriticalLifetimePercent}} {
		if f.v < 1 || f.v > 100 {
			bad("policy.%s %d: want 1..100 (100 turns the lifetime condition off)", f.name, f.v)
		}
	}
	if p.ExpiringCriticalLifetimePercent > p.ExpiringWarningLifetimePercent {
		bad("policy.expiring_critical_lifetime_percent (%d) is more than policy.expiring_warning_lifetime_percent (%d)",
			p.ExpiringCriticalLifetimePercent, p.ExpiringWarningLifetimePercent)
	}
	if p.MaxBundleCAs < 0 || p.MinRSABits < 0 {
		bad("policy: max_bundle_cas and min_rsa_bits must not be negative")
	}
	return errs
}
