package bind

import (
	"slices"
	"strings"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/ref"
)

// SDS secret names that name a Kubernetes Secret.
//
// Istio's gateways ask istiod for "kubernetes://name" (the Secret in the proxy's namespace),
// "kubernetes://ns/name", and for Gateway API listeners "kubernetes-gateway://ns/name"; the trust
// bundle of a MUTUAL server is the same name with "-cacert" appended. istiod resolves a -cacert
// name by reading the Secret without the suffix and taking its CA key ("cacert", else "ca.crt"),
// and only when that Secret is missing or holds no CA, the Secret named with the suffix
// (istio pilot/pkg/credentials/kube/secrets.go, GetCaCert). "default" and "ROOTCA" are the
// workload certificate and mesh root that istio-agent mints from istiod: no Secret lies behind
// them, so they bind nothing and are never reported.
//
// Envoy Gateway names the SDS secret of a Gateway listener's certificateRef after the Secret:
// "ns/name" (internal/gatewayapi: irTLSConfigs).

// Istio's SDS names.
const (
	istioSecretScheme  = "kubernetes://"
	istioGatewayScheme = "kubernetes-gateway://"
	istioCASuffix      = "-cacert"
	istioWorkloadCert  = "default"
	istioWorkloadRoot  = "ROOTCA"
)

// SDSKind says what an SDS secret name stands for.
type SDSKind string

const (
	// SDSCertificate: a certificate and key from a Secret.
	SDSCertificate SDSKind = "certificate"
	// SDSTrust: the CA bundle part of a Secret (Istio's -cacert names).
	SDSTrust SDSKind = "trust"
	// SDSWorkload: a workload identity minted by the mesh (Istio's default, ROOTCA): no Secret.
	SDSWorkload SDSKind = "workload"
)

// SDSRef is the Secret an SDS secret name refers to.
type SDSRef struct {
	Kind SDSKind
	// Namespace and Name of the Secret; for SDSTrust the Secret whose CA part is read first.
	Namespace, Name string
	// Fallback is, for SDSTrust, the Secret read when Name is missing or holds no CA: Istio's
	// "<name>-cacert".
	Fallback string
	// Scheme is how the name was written: "kubernetes", "kubernetes-gateway" or "envoy-gateway".
	Scheme string
}

// Source is the desired source name of the referenced Secret ("namespace/name").
func (r SDSRef) Source() string {
	return ref.Source{Kind: ref.Secret, Namespace: r.Namespace, Name: r.Name}.String()
}

// ParseSDSName reads an SDS secret name as Istio or Envoy Gateway write it. podNS is the proxy's
// namespace (Istio's "kubernetes://name" is relative to it). ok is false for names that refer to
// no Secret by any of those conventions (file-based SDS names, names of other control planes);
// Istio's workload names return Kind SDSWorkload with ok true, so callers can tell them apart
// from unknown names and skip them on purpose.
func ParseSDSName(sdsName, podNS string) (SDSRef, bool) {
	if len(sdsName) > 512 {
		return SDSRef{}, false
	}
	switch {
	case sdsName == istioWorkloadCert || sdsName == istioWorkloadRoot:
		return SDSRef{Kind: SDSWorkload}, true
	case strings.HasPrefix(sdsName, istioGatewayScheme):
		ns, name, hasNS := kube.SplitRef(strings.TrimPrefix(sdsName, istioGatewayScheme))
		if !hasNS {
			return SDSRef{}, false // Gateway API credentials always carry their namespace
		}
		return istioRef("kubernetes-gateway", ns, name)
	case strings.HasPrefix(sdsName, istioSecretScheme):
		ns, name, hasNS := kube.SplitRef(strings.TrimPrefix(sdsName, istioSecretScheme))
		if !hasNS {
			ns = podNS
		}
		return istioRef("kubernetes", ns, name)
	case strings.Contains(sdsName, "://"):
		return SDSRef{}, false
	}
	ns, name, hasNS := kube.SplitRef(sdsName)
	if !hasNS || !kube.ValidRef(ns, name) {
		return SDSRef{}, false
	}
	return SDSRef{Kind: SDSCertificate, Namespace: ns, Name: name, Scheme: "envoy-gateway"}, true
}

func istioRef(scheme, ns, name string) (SDSRef, bool) {
	if base, ok := strings.CutSuffix(name, istioCASuffix); ok && base != "" {
		if !kube.ValidRef(ns, base) || !kube.ValidRef(ns, name) {
			return SDSRef{}, false
		}
		return SDSRef{Kind: SDSTrust, Namespace: ns, Name: base, Fallback: name, Scheme: scheme}, true
	}
	if !kube.ValidRef(ns, name) {
		return SDSRef{}, false
	}
	return SDSRef{Kind: SDSCertificate, Namespace: ns, Name: name, Scheme: scheme}, true
}

// SecretLookup says whether the inventory holds a Secret ("namespace/name") and whether it has a
// CA bundle. A nil SecretLookup knows no Secret.
type SecretLookup func(source string) (exists, hasCA bool)

// TrustBinding ties an SDS validation secret (a trust bundle) to the Secret it comes from.
type TrustBinding struct {
	Secret string // SDS secret name
	Source string // "namespace/name" of the Secret whose CA part it is
	// Missing: istiod would find no CA: the Secret is absent or holds none, and no -cacert
	// fallback Secret exists (Source is then the Secret without the suffix).
	Missing bool
}

// SDSBindings binds the certificate SDS secrets an Envoy reports (config_dump secrets and the
// names its listeners ask for, which includes secrets still warming) to the Secrets their names
// refer to, with Origin "sds-name"; trust secrets (-cacert) come back as TrustBindings. A bare
// "ns/name" is Envoy Gateway's convention: it binds for Envoy Gateway pods, and for other pods
// only when the inventory holds that Secret (a plain Envoy may name its SDS secrets anything).
// A Secret the pod declares in certdrift.dev/secrets keeps Origin "config": the explicit
// annotation wins.
func SDSBindings(t kube.EnvoyTarget, snap *envoystate.Snapshot, lookup SecretLookup) ([]config.Binding, []TrustBinding) {
	if snap == nil {
		return nil, nil
	}
	if lookup == nil {
		lookup = func(string) (bool, bool) { return false, false }
	}
	certNames, trustNames := sdsNames(snap)

	var bs []config.Binding
	var trust []TrustBinding
	seen := map[config.Binding]bool{}
	for _, n := range certNames {
		sr, ok := ParseSDSName(n, t.Namespace)
		if !ok || sr.Kind == SDSWorkload {
			continue
		}
		if sr.Kind == SDSTrust {
			// Envoy asked for a -cacert name as a certificate: Istio never serves one that way.
			continue
		}
		src := sr.Source()
		if sr.Scheme == "envoy-gateway" && t.Preset != kube.PresetEnvoyGateway {
			if exists, _ := lookup(src); !exists {
				continue
			}
		}
		b := config.Binding{Source: src, Secret: n, Origin: originFor(t, src, audit.OriginSDSName)}
		if !seen[b] {
			seen[b] = true
			bs = append(bs, b)
		}
	}
	for _, n := range trustNames {
		sr, ok := ParseSDSName(n, t.Namespace)
		if !ok || sr.Kind != SDSTrust {
			continue
		}
		tb := TrustBinding{Secret: n, Source: sr.Source()}
		if exists, hasCA := lookup(sr.Source()); !exists || !hasCA {
			fb := ref.Source{Kind: ref.Secret, Namespace: sr.Namespace, Name: sr.Fallback}.String()
			if fbExists, _ := lookup(fb); fbExists {
				tb.Source = fb
			} else {
				tb.Missing = true
			}
		}
		trust = append(trust, tb)
	}
	return bs, trust
}

// sdsNames are the certificate and validation SDS secret names an Envoy reports: config_dump
// secrets and the names its listeners ask for (which includes secrets still warming).
func sdsNames(snap *envoystate.Snapshot) (certNames, trustNames []string) {
	addName := func(list *[]string, n string) {
		if n != "" && !slices.Contains(*list, n) {
			*list = append(*list, n)
		}
	}
	for _, s := range snap.Secrets {
		if s.HasCertificate {
			addName(&certNames, s.Name)
		}
		if s.HasValidation {
			addName(&trustNames, s.Name)
		}
	}
	for _, fc := range snap.Listeners {
		for _, n := range fc.SDSCertNames {
			addName(&certNames, n)
		}
		addName(&trustNames, fc.SDSValidationName)
	}
	return certNames, trustNames
}

// SDSRefs lists the Secrets the SDS secret names of an Envoy may refer to (for a trust name both
// the Secret without the -cacert suffix and the one with it), so that those the inventory does
// not watch (Opaque -cacert Secrets, say) can be read before SDSBindings resolves the names.
func SDSRefs(t kube.EnvoyTarget, snap *envoystate.Snapshot) []ref.Source {
	if snap == nil {
		return nil
	}
	certNames, trustNames := sdsNames(snap)
	var out []ref.Source
	add := func(ns, name string) {
		r := ref.Source{Kind: ref.Secret, Namespace: ns, Name: name}
		if name != "" && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	for _, n := range slices.Concat(certNames, trustNames) {
		sr, ok := ParseSDSName(n, t.Namespace)
		if !ok || sr.Kind == SDSWorkload {
			continue
		}
		add(sr.Namespace, sr.Name)
		if sr.Kind == SDSTrust {
			add(sr.Namespace, sr.Fallback)
		}
	}
	return out
}

// Binding is the trust binding as the audit takes it: the source holding the bundle, under the
// validation secret's SDS name. A Missing trust binds the Secret istiod would read first, so the
// audit can say the bundle has no source.
func (tb TrustBinding) Binding(t kube.EnvoyTarget) config.Binding {
	return config.Binding{Source: tb.Source, Secret: tb.Secret, Origin: originFor(t, tb.Source, audit.OriginSDSName)}
}
