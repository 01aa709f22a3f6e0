package kube

import (
	"slices"
	"strings"

	"github.com/certdrift/certdrift/ref"
)

// MountedRefs lists the Secrets and ConfigMaps mounted into the Envoy container (every container
// when it is unknown; never the service account token volume's kube-root-ca.crt) and the Secrets
// certdrift.dev/secrets declares, each once.
func MountedRefs(t EnvoyTarget) []ref.Source {
	var out []ref.Source
	add := func(r ref.Source) {
		if r.Name != "" && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	vols := map[string]PodVolume{}
	for _, v := range t.Volumes {
		vols[v.Name] = v
	}
	for _, m := range t.Mounts {
		if (t.EnvoyContainer != "" && m.Container != t.EnvoyContainer) || vols[m.Volume].Token {
			continue
		}
		for _, src := range vols[m.Volume].Sources {
			add(ref.Source{Kind: src.Kind, Namespace: t.Namespace, Name: src.Name})
		}
	}
	for _, d := range t.DeclaredSecrets {
		if ns, name, ok := SplitRef(d); ok {
			add(ref.Source{Kind: ref.Secret, Namespace: ns, Name: name})
		}
	}
	return out
}

// SplitRef splits "ns/name" (or "name") into its parts.
func SplitRef(s string) (ns, name string, hasNS bool) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return "", s, false
}
