package kube

import (
	"net"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/envoyadmin"
)

// Bindings of a pod, expressed in the config types the audit already judges, so that the
// Kubernetes mode needs no audit of its own.
//
// Why not a desired "alias" Observation whose Source.Dir is the container mount path (so the
// audit's watched-directory rule matches file-based SDS)? Mount paths are container paths and
// every replica of every Deployment mounts at the same few (/certs, /etc/envoy/tls): one global
// alias for "/certs" would bind a pod in namespace a to the Secret of namespace b. Instead the
// watched directory is resolved per pod, through that pod's mounts, into an explicit binding
// (LoadedBindings): the audit sees {source, secret} and compares the certificate Envoy inlined.

// DefaultCertKey is the certificate key of a kubernetes.io/tls Secret.
const DefaultCertKey = "tls.crt"

// PodBindings is what one Envoy pod must load and serve, from its spec alone.
type PodBindings struct {
	// Envoy has Name "namespace/pod", Endpoints (pod IP and each probe port with its SNIs) and
	// Bindings; Admin is left for the caller, who knows how the admin is reached.
	Envoy config.Envoy
	// Risks are mounts that will never see a rotation (subPath) or cannot be resolved.
	Risks []MountRisk
}

// MountRisk is a Secret mount that does not follow Secret updates.
type MountRisk struct {
	Container string
	Volume    string
	MountPath string
	SubPath   string // SubPath or SubPathExpr as written
	Source    string // "namespace/secret"
	// File is where the certificate appears in the container, when it does.
	File   string
	Reason string
}

// mountedCert is the certificate file of one Secret source as one container sees it.
type mountedCert struct {
	source string // "namespace/name"
	dir    string // directory holding the file, as a container path
	file   string // container path of the certificate
	// subPath: a copy made at container start.
	subPath bool
	// volume and rel locate the file in the volume, for paths the node reports.
	volume, rel string
}

// Bind derives a pod's desired bindings from its spec: each Secret volume and projected Secret
// source mounted into the Envoy container binds "namespace/secret" to <mountPath>/<file of
// certKey> (tls.crt unless items map it elsewhere), and each certdrift.dev/secrets reference
// binds that Secret with no location (the audit locates it by SDS name or inference). subPath
// mounts are bound too (Envoy may read them) but also returned as risks: they never update.
func Bind(t EnvoyTarget, certKey string) PodBindings {
	if certKey == "" {
		certKey = DefaultCertKey
	}
	pb := PodBindings{Envoy: config.Envoy{Name: t.Key(), Endpoints: probeEndpoints(t)}}
	seen := map[[2]string]bool{}
	addBinding := func(b config.Binding) {
		k := [2]string{b.Source, b.File}
		if seen[k] {
			return
		}
		seen[k] = true
		pb.Envoy.Bindings = append(pb.Envoy.Bindings, b)
	}
	mcs, risks := mountedCerts(t, certKey)
	pb.Risks = risks
	for _, mc := range mcs {
		addBinding(config.Binding{Source: mc.source, File: mc.file, Origin: originFor(t, mc.source, OriginPath)})
	}
	for _, ref := range t.DeclaredSecrets {
		if slices.ContainsFunc(pb.Envoy.Bindings, func(b config.Binding) bool { return b.Source == ref }) {
			continue
		}
		addBinding(config.Binding{Source: ref, Origin: OriginConfig})
	}
	return pb
}

// originFor is OriginConfig for a Secret the pod declares in certdrift.dev/secrets (the explicit
// annotation wins over what the spec or Envoy suggests), else dflt.
func originFor(t EnvoyTarget, source, dflt string) string {
	if slices.Contains(t.DeclaredSecrets, source) {
		return OriginConfig
	}
	return dflt
}

// LoadedBindings ties what an Envoy reports loading to the pod's Secret mounts: an SDS secret
// whose watched directory or certificate file is where a Secret's certificate is mounted, or
// that a listener's file-based sds_config watches (or reads its resource from) there, binds
// that Secret under the SDS name (Envoy 1.36–1.40 inline what file-based SDS read and keep only
// the watched directory, so this is the only way back from such a secret to its Secret); a
// certificate file in /certs or a listener binds it under that path. The bindings come first in
// what the caller passes to the audit, so the path Envoy reports wins over the spec's.
//
// A reported path names a mount either as the container sees it (mountPath/…) or as the node
// does: a path holding the pod's UID and ending in <volume>/<file> is that volume on the node
// (the kubelet's /var/lib/kubelet/pods/<uid>/volumes/…/<volume>/, or the testbed's rewrite).
func LoadedBindings(t EnvoyTarget, certKey string, snap *envoyadmin.Snapshot) []config.Binding {
	if snap == nil {
		return nil
	}
	if certKey == "" {
		certKey = DefaultCertKey
	}
	mcs, _ := mountedCerts(t, certKey)
	var out []config.Binding
	seen := map[config.Binding]bool{}
	add := func(b config.Binding) {
		if !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	for _, s := range snap.Secrets {
		if !s.HasCertificate || s.Name == "" {
			continue
		}
		for _, mc := range mcs {
			switch {
			case s.CertFile != "" && mc.isFile(t.UID, s.CertFile):
				add(config.Binding{Source: mc.source, Secret: s.Name, File: s.CertFile, Origin: originFor(t, mc.source, OriginPath)})
			case s.WatchedDir != "" && mc.isDir(t.UID, s.WatchedDir):
				add(config.Binding{Source: mc.source, Secret: s.Name, Origin: originFor(t, mc.source, OriginPath)})
			}
		}
	}
	// File-based SDS as listeners configure it: Envoy 1.40 inlines what it read and its dumped
	// secret keeps no file name nor directory, but the listener's sds_config still says which
	// directory it watches (or where its resource file lives). A Secret mounted there is what the
	// SDS secret holds, whether or not Envoy managed to load it.
	for _, fc := range snap.Listeners {
		for _, src := range fc.SDSCertSources {
			if src.Name == "" {
				continue
			}
			for _, mc := range mcs {
				if (src.WatchedDir != "" && mc.isDir(t.UID, src.WatchedDir)) ||
					(src.Path != "" && mc.isDir(t.UID, path.Dir(path.Clean(src.Path)))) {
					add(config.Binding{Source: mc.source, Secret: src.Name, Origin: originFor(t, mc.source, OriginPath)})
				}
			}
		}
	}
	var files []string
	for _, c := range snap.Contexts {
		for _, cd := range c.Chain {
			files = append(files, cd.Path)
		}
	}
	for _, fc := range snap.Listeners {
		files = append(files, fc.CertFiles...)
	}
	for _, f := range files {
		for _, mc := range mcs {
			if f != "" && mc.isFile(t.UID, f) {
				add(config.Binding{Source: mc.source, File: f, Origin: originFor(t, mc.source, OriginPath)})
			}
		}
	}
	return out
}

func (mc mountedCert) isFile(uid, p string) bool {
	p = path.Clean(p)
	if p == mc.file {
		return true
	}
	return !mc.subPath && uid != "" && strings.Contains(p, uid) && strings.HasSuffix(p, "/"+path.Join(mc.volume, mc.rel))
}

func (mc mountedCert) isDir(uid, p string) bool {
	p = path.Clean(p)
	if p == mc.dir {
		return true
	}
	return !mc.subPath && uid != "" && strings.Contains(p, uid) && strings.HasSuffix(p, "/"+path.Dir(path.Join(mc.volume, mc.rel)))
}

// ListenerEndpoints are the TLS endpoints of a pod read from its Envoy's listeners, for pods
// that declare no certdrift.dev/probe-ports: one per TLS listener port, with the exact (not
// wildcard) server names of its filter chains as SNIs.
func ListenerEndpoints(podIP string, ls []envoyadmin.FilterChainTLS) []config.Endpoint {
	if podIP == "" {
		return nil
	}
	var ports []int
	snis := map[int][]string{}
	for _, fc := range ls {
		_, p, err := net.SplitHostPort(fc.Address)
		if err != nil {
			continue
		}
		port, err := strconv.Atoi(p)
		if err != nil || port < 1 || port > 65535 {
			continue
		}
		if !slices.Contains(ports, port) {
			ports = append(ports, port)
		}
		for _, n := range fc.ServerNames {
			if n != "" && !strings.HasPrefix(n, "*") && !slices.Contains(snis[port], n) && len(snis[port]) < maxSNIsPerPort {
				snis[port] = append(snis[port], n)
			}
		}
		if len(ports) == maxProbePorts {
			break
		}
	}
	slices.Sort(ports)
	out := make([]config.Endpoint, 0, len(ports))
	for _, p := range ports {
		out = append(out, config.Endpoint{Address: net.JoinHostPort(podIP, strconv.Itoa(p)), SNI: snis[p]})
	}
	return out
}

func probeEndpoints(t EnvoyTarget) []config.Endpoint {
	if t.PodIP == "" {
		return nil
	}
	var out []config.Endpoint
	for _, pp := range t.ProbePorts {
		out = append(out, config.Endpoint{
			Address: net.JoinHostPort(t.PodIP, strconv.Itoa(pp.Port)),
			SNI:     slices.Clone(pp.SNIs),
		})
	}
	return out
}

// mountedCerts resolves where each Secret source's certificate appears in the Envoy container
// (every container when the Envoy container is unknown).
func mountedCerts(t EnvoyTarget, certKey string) ([]mountedCert, []MountRisk) {
	vols := map[string]PodVolume{}
	for _, v := range t.Volumes {
		vols[v.Name] = v
	}
	var out []mountedCert
	var risks []MountRisk
	for _, m := range t.Mounts {
		if t.EnvoyContainer != "" && m.Container != t.EnvoyContainer {
			continue
		}
		v, ok := vols[m.Volume]
		if !ok || m.MountPath == "" {
			continue
		}
		mountPath := path.Clean(m.MountPath)
		for _, src := range v.Sources {
			if src.Kind != "Secret" || src.Name == "" {
				continue
			}
			source := SecretSourceName(t.Namespace, src.Name)
			rel, ok := certFileIn(src, certKey)
			if !ok {
				continue
			}
			if m.SubPathExpr != "" {
				// The expansion depends on the container's environment, unknown here.
				risks = append(risks, MountRisk{Container: m.Container, Volume: m.Volume, MountPath: m.MountPath,
					SubPath: m.SubPathExpr, Source: source, Reason: "subPathExpr mount: a copy made at container start that never updates"})
				continue
			}
			if m.SubPath != "" {
				sub := path.Clean(m.SubPath)
				var file string
				switch {
				case rel == sub:
					file = mountPath
				case strings.HasPrefix(rel, sub+"/"):
					file = path.Join(mountPath, strings.TrimPrefix(rel, sub+"/"))
				default:
					continue // this source's certificate is not under the mounted subPath
				}
				risks = append(risks, MountRisk{Container: m.Container, Volume: m.Volume, MountPath: m.MountPath,
					SubPath: m.SubPath, Source: source, File: file, Reason: "subPath mount: a copy made at container start that never updates"})
				out = append(out, mountedCert{source: source, dir: path.Dir(file), file: file, subPath: true, volume: m.Volume, rel: rel})
				continue
			}
			file := path.Join(mountPath, rel)
			out = append(out, mountedCert{source: source, dir: path.Dir(file), file: file, volume: m.Volume, rel: rel})
		}
	}
	return out, risks
}

// certFileIn is the path of the certificate key inside the volume: the key itself, or its
// items mapping; false when items are listed and leave the key out.
func certFileIn(src VolumeSource, certKey string) (string, bool) {
	if len(src.Items) == 0 {
		return certKey, true
	}
	for _, it := range src.Items {
		if it.Key == certKey && it.Path != "" {
			p := path.Clean(it.Path)
			// The API server rejects absolute and ".." item paths; be as strict here.
			if path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
				return "", false
			}
			return p, true
		}
	}
	return "", false
}
