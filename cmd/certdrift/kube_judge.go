package main

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/files"
)

// AuditByNamespace judges Kubernetes inputs one namespace at a time and merges the reports. A
// pod can mount only Secrets of its own namespace, but the audit's last-resort inference binds a
// loaded certificate to any desired one with the same DNS names: with the same host name served
// in two namespaces (a staging copy, a migration), every pod would be "stale" against the other
// namespace's Secret. So each namespace's Envoys are judged against that namespace's Secrets and
// ConfigMaps plus the Secrets their bindings name elsewhere (certdrift.dev/secrets), and the
// desired view on its own is judged once, over everything.
func AuditByNamespace(in audit.Inputs, policy config.Policy, now time.Time) audit.Report {
	whole := audit.Run(audit.Inputs{Config: &config.Config{Policy: policy}, Desired: in.Desired}, policy, now)
	r := audit.Report{GeneratedAt: now, Bindings: []audit.Binding{}, Findings: []audit.Finding{}}
	for _, f := range whole.Findings {
		if f.Subject.Envoy == "" {
			r.Findings = append(r.Findings, f)
		}
	}
	byNS := map[string][]audit.EnvoyView{}
	var order []string
	for _, ev := range in.Envoys {
		ns, _, _ := strings.Cut(ev.Config.Name, "/")
		if _, ok := byNS[ns]; !ok {
			order = append(order, ns)
		}
		byNS[ns] = append(byNS[ns], ev)
	}
	for _, ns := range order {
		evs := byNS[ns]
		named := map[string]bool{}
		var envoys []config.Envoy
		for _, ev := range evs {
			envoys = append(envoys, ev.Config)
			for _, b := range ev.Config.Bindings {
				named[b.Source] = true
			}
		}
		var desired []files.Observation
		for _, o := range in.Desired {
			n := strings.TrimPrefix(o.Source.Name, "configmap:")
			if strings.HasPrefix(n, ns+"/") || named[o.Source.Name] {
				desired = append(desired, o)
			}
		}
		part := audit.Run(audit.Inputs{Config: &config.Config{Envoys: envoys, Policy: policy}, Desired: desired, Envoys: evs}, policy, now)
		r.Bindings = append(r.Bindings, part.Bindings...)
		for _, f := range part.Findings {
			// Findings about the desired view alone came from the whole run.
			if f.Subject.Envoy != "" {
				r.Findings = append(r.Findings, f)
			}
		}
		r.Summary.Handshakes += part.Summary.Handshakes
	}
	slices.SortStableFunc(r.Findings, func(x, y audit.Finding) int {
		return cmp.Or(cmp.Compare(y.Severity, x.Severity), cmp.Compare(x.Subject.Envoy, y.Subject.Envoy),
			cmp.Compare(x.Subject.Source, y.Subject.Source), cmp.Compare(x.Code, y.Code))
	})
	r.Summary.DesiredSources = len(in.Desired)
	r.Summary.Envoys = len(in.Envoys)
	r.Summary.Bindings = len(r.Bindings)
	r.Summary.Findings = map[string]int{}
	for _, f := range r.Findings {
		r.Summary.Findings[f.Severity.String()]++
	}
	return r
}
