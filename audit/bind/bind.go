package bind

import (
	"cmp"
	"crypto/x509"
	"net"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/ref"
)

// Bindings of a pod are expressed in the config types the audit already judges, so that the
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

// DefaultCAKey is the CA bundle key of a kubernetes.io/tls Secret (cert-manager's ca.crt).
const DefaultCAKey = "ca.crt"

// ItemKeys are the data keys of one desired item: which file of a mounted Secret or ConfigMap is
// its certificate, its key and its CA bundle.
type ItemKeys struct {
	Item string // the desired item ("" for a kubernetes.io/tls Secret; the key of a ConfigMap bundle)
	Cert string // "" for a CA-only item
	Key  string
	CA   string
	// Names are the DNS names of the item's leaf, kept only for the items of a merged Secret
	// (several items): what tells which item an SDS secret watching their shared directory holds.
	Names []string
}

// SourceKeys are the item keys of each desired source, by source name ("namespace/name",
// "configmap:namespace/name"), as the inventory read them. A Secret it does not know is read with
// the kubernetes.io/tls keys; a ConfigMap it does not know holds no bundle.
type SourceKeys map[string][]ItemKeys

// tlsKeys are the keys of a kubernetes.io/tls Secret.
var tlsKeys = []ItemKeys{{Cert: DefaultCertKey, Key: "tls.key", CA: DefaultCAKey}}

func (k SourceKeys) of(kind ref.Kind, source string) []ItemKeys {
	if its, ok := k[source]; ok {
		return its
	}
	if kind == ref.Secret {
		return tlsKeys
	}
	return nil
}

// KeysOf collects the item keys of the summaries in snaps (the inventory's, and what Fetch read).
func KeysOf(snaps ...kube.Snapshot) SourceKeys {
	out := SourceKeys{}
	for _, s := range snaps {
		for _, sec := range s.Secrets {
			its := make([]ItemKeys, 0, len(sec.Items))
			for _, it := range sec.Items {
				ik := ItemKeys{Item: it.Name, Cert: it.CertKey, Key: it.KeyKey, CA: it.CAKey}
				if l := it.Leaf(); l != nil && len(sec.Items) > 1 {
					if c, err := x509.ParseCertificate(l.DER); err == nil {
						ik.Names = c.DNSNames
					}
				}
				its = append(its, ik)
			}
			out[ref.Source{Kind: ref.Secret, Namespace: sec.Namespace, Name: sec.Name}.String()] = its
		}
		for _, cm := range s.ConfigMaps {
			its := make([]ItemKeys, 0, len(cm.Bundles))
			for _, b := range cm.Bundles {
				its = append(its, ItemKeys{Item: b.Key, CA: b.Key})
			}
			out[ref.Source{Kind: ref.ConfigMap, Namespace: cm.Namespace, Name: cm.Name}.String()] = its
		}
	}
	return out
}

// PodBindings is what one Envoy pod must load and serve, from its spec alone.
type PodBindings struct {
	// Envoy has Name "namespace/pod", Endpoints (pod IP and each probe port with its SNIs) and
	// Bindings; Admin is left for the caller, who knows how the admin is reached.
	Envoy config.Envoy
	// Risks are mounts that will never see a rotation (subPath) or cannot be resolved: one per
	// mount, so two subPath mounts of one Secret (its certificate and its CA, say) are two risks.
	Risks []MountRisk
}

// MountRisk is a Secret (or CA-bundle ConfigMap) mount that does not follow updates.
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

// mountedSource is one item of one Secret or ConfigMap source as one container sees it.
type mountedSource struct {
	source, item string
	names        []string // ItemKeys.Names
	// file and caFile are the container paths of the certificate and of the CA bundle, "" when
	// the mount does not show them.
	file, caFile string
	dir          string // directory holding them, as a container path
	// subPath: a copy made at container start.
	subPath bool
	// token: from a volume that projects a service account token (kube.PodVolume.Token).
	token bool
	// volume, rel and caRel locate the files in the volume, for paths the node reports.
	volume, rel, caRel string
}

// Bind derives a pod's desired bindings from its spec: each item of each Secret or CA-bundle
// ConfigMap source mounted into the Envoy container (a secret or configMap volume, or a source
// of a projected volume) binds its source to the container paths of its certificate (File) and
// CA bundle (CAFile), with Dir the directory they appear in; a CA-only source (a trust bundle
// Secret, a ConfigMap) binds with a CAFile and no File. keys says which keys each source's items
// use (tls.crt and ca.crt for a Secret it does not know); items mappings are honoured. Each
// certdrift.dev/secrets reference binds that Secret with no location (the audit locates it by SDS
// name or inference). subPath mounts are bound too (Envoy may read them) and also returned as
// risks: they never update.
func Bind(t kube.EnvoyTarget, keys SourceKeys) PodBindings {
	pb := PodBindings{Envoy: config.Envoy{Name: t.Key(), Endpoints: probeEndpoints(t)}}
	seen := map[config.Binding]bool{}
	addBinding := func(b config.Binding) {
		if seen[b] {
			return
		}
		seen[b] = true
		pb.Envoy.Bindings = append(pb.Envoy.Bindings, b)
	}
	mss, risks := mountedSources(t, keys)
	pb.Risks = risks
	for _, ms := range mss {
		if ms.token {
			continue
		}
		addBinding(config.Binding{Source: ms.source, Item: ms.item, File: ms.file, CAFile: ms.caFile, Dir: ms.dir,
			Origin: originFor(t, ms.source, audit.OriginPath)})
	}
	for _, ref := range t.DeclaredSecrets {
		if slices.ContainsFunc(pb.Envoy.Bindings, func(b config.Binding) bool { return b.Source == ref }) {
			continue
		}
		addBinding(config.Binding{Source: ref, Origin: audit.OriginConfig})
	}
	return pb
}

// originFor is audit.OriginConfig for a Secret the pod declares in certdrift.dev/secrets (the explicit
// annotation wins over what the spec or Envoy suggests), else dflt.
func originFor(t kube.EnvoyTarget, source, dflt string) string {
	if slices.Contains(t.DeclaredSecrets, source) {
		return audit.OriginConfig
	}
	return dflt
}

// LoadedBindings ties what an Envoy reports loading to the pod's Secret mounts: an SDS secret
// whose watched directory or certificate file is where a Secret's certificate is mounted, or
// that a listener's file-based sds_config watches (or reads its resource from) there, binds
// that Secret under the SDS name (Envoy 1.36–1.40 inline what file-based SDS read and keep only
// the watched directory, so this is the only way back from such a secret to its Secret); a
// certificate file in /certs or a listener binds it under that path. Trust is bound the same
// way: a validation secret watching (or reading from) the directory of a mounted CA bundle, and
// a CA file in /certs (ca_cert), a secret or a listener that is a mounted CA bundle, bind the
// source holding that bundle with CAFile as Envoy reports it. The bindings come first in what the
// caller passes to the audit, so the path Envoy reports wins over the spec's.
//
// A reported path names a mount either as the container sees it (mountPath/…) or as the node
// does: a path holding the pod's UID and ending in <volume>/<file> is that volume on the node
// (the kubelet's /var/lib/kubelet/pods/<uid>/volumes/…/<volume>/, or the testbed's rewrite).
func LoadedBindings(t kube.EnvoyTarget, keys SourceKeys, snap *envoystate.Snapshot) []config.Binding {
	if snap == nil {
		return nil
	}
	mss, _ := mountedSources(t, keys)
	var out []config.Binding
	seen := map[config.Binding]bool{}
	add := func(ms mountedSource, b config.Binding) {
		b.Source, b.Item, b.Origin = ms.source, ms.item, originFor(t, ms.source, audit.OriginPath)
		if b.Dir == "" {
			b.Dir = ms.dir
		}
		if !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	// A directory holds every item of a merged Secret (a.crt, b.crt, one ca.crt): an SDS secret
	// watching it may be any of them, so when several items match it binds the source with no
	// item and leaves the item to the audit, which compares certificates.
	type dirKey struct {
		source, secret string
		trust          bool
	}
	type dirMatch struct {
		ms mountedSource
		b  config.Binding
	}
	var dirOrder []dirKey
	dirMatches := map[dirKey][]dirMatch{}
	loadedLeaf := map[string]*x509.Certificate{}
	for _, s := range snap.Secrets {
		if s.HasCertificate && len(s.Chain) > 0 && loadedLeaf[s.Name] == nil {
			loadedLeaf[s.Name] = s.Chain[0]
		}
	}
	addDir := func(ms mountedSource, b config.Binding, trust bool) {
		k := dirKey{ms.source, b.Secret, trust}
		if _, ok := dirMatches[k]; !ok {
			dirOrder = append(dirOrder, k)
		}
		dirMatches[k] = append(dirMatches[k], dirMatch{ms, b})
	}
	for _, s := range snap.Secrets {
		if s.Name == "" {
			continue
		}
		for _, ms := range mss {
			if s.HasCertificate && ms.file != "" {
				switch {
				case s.CertFile != "" && ms.isFile(t.UID, s.CertFile):
					add(ms, config.Binding{Secret: s.Name, File: s.CertFile, CAFile: ms.fromFile(s.CertFile, ms.rel), Dir: path.Dir(path.Clean(s.CertFile))})
				case s.WatchedDir != "" && ms.isDir(t.UID, s.WatchedDir):
					addDir(ms, config.Binding{Secret: s.Name, CAFile: ms.fromDir(s.WatchedDir), Dir: path.Clean(s.WatchedDir)}, false)
				}
			}
			if s.HasValidation && ms.caFile != "" {
				switch {
				case s.CAFile != "" && ms.isCAFile(t.UID, s.CAFile):
					add(ms, config.Binding{Secret: s.Name, CAFile: s.CAFile, Dir: path.Dir(path.Clean(s.CAFile))})
				case s.WatchedDir != "" && ms.isDir(t.UID, s.WatchedDir):
					addDir(ms, config.Binding{Secret: s.Name, CAFile: ms.fromDir(s.WatchedDir), Dir: path.Clean(s.WatchedDir)}, true)
				}
			}
		}
	}
	// File-based SDS as listeners configure it: Envoy 1.40 inlines what it read and its dumped
	// secret keeps no file name nor directory, but the listener's sds_config still says which
	// directory it watches (or where its resource file lives). A Secret mounted there is what the
	// SDS secret holds, whether or not Envoy managed to load it.
	inDir := func(ms mountedSource, src envoystate.SDSSource) (string, bool) {
		if src.WatchedDir != "" && ms.isDir(t.UID, src.WatchedDir) {
			return path.Clean(src.WatchedDir), true
		}
		if src.Path != "" && ms.isDir(t.UID, path.Dir(path.Clean(src.Path))) {
			return path.Dir(path.Clean(src.Path)), true
		}
		return "", false
	}
	for _, fc := range snap.Listeners {
		for _, src := range fc.SDSCertSources {
			if src.Name == "" {
				continue
			}
			for _, ms := range mss {
				if dir, ok := inDir(ms, src); ok && ms.file != "" {
					addDir(ms, config.Binding{Secret: src.Name, CAFile: ms.fromDir(dir), Dir: dir}, false)
				}
			}
		}
		if src := fc.SDSValidationSource; src != nil && src.Name != "" {
			for _, ms := range mss {
				if dir, ok := inDir(ms, *src); ok && ms.caFile != "" {
					addDir(ms, config.Binding{Secret: src.Name, CAFile: ms.fromDir(dir), Dir: dir}, true)
				}
			}
		}
	}
	for _, k := range dirOrder {
		ms := dirMatches[k]
		items := map[string]bool{}
		for _, m := range ms {
			items[m.ms.item] = true
		}
		if len(items) > 1 && !k.trust {
			// The certificate Envoy inlined says which item: the one whose leaf has its names
			// (names survive a rotation, serials do not).
			var named []dirMatch
			for _, m := range ms {
				if c := loadedLeaf[k.secret]; c != nil && len(m.ms.names) > 0 && pki.SameNames(m.ms.names, c.DNSNames) {
					named = append(named, m)
				}
			}
			if len(named) == 1 {
				ms = named
				items = map[string]bool{named[0].ms.item: true}
			}
		}
		if len(items) == 1 {
			for _, m := range ms {
				add(m.ms, m.b)
			}
			continue
		}
		first, b := ms[0].ms, ms[0].b
		for _, m := range ms[1:] {
			if m.b.CAFile != b.CAFile {
				b.CAFile = ""
			}
		}
		first.item = ""
		add(first, b)
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
		for _, ms := range mss {
			if f != "" && ms.file != "" && ms.isFile(t.UID, f) {
				add(ms, config.Binding{File: f, CAFile: ms.fromFile(f, ms.rel), Dir: path.Dir(path.Clean(f))})
			}
		}
	}
	var caFiles []string
	for _, c := range snap.Contexts {
		for _, cd := range c.CA {
			caFiles = append(caFiles, cd.Path)
		}
	}
	for _, fc := range snap.Listeners {
		caFiles = append(caFiles, fc.CAFile)
	}
	for _, f := range caFiles {
		for _, ms := range mss {
			if f != "" && ms.caFile != "" && ms.isCAFile(t.UID, f) {
				add(ms, config.Binding{CAFile: f, Dir: path.Dir(path.Clean(f))})
			}
		}
	}
	return out
}

// fromFile is where the source's CA bundle is, written as reported (a path Envoy reported for the
// volume file rel) is written: the container path, or the same node directory.
func (ms mountedSource) fromFile(reported, rel string) string {
	return ms.sibling(reported, path.Join(ms.volume, rel))
}

// fromDir is fromFile for a reported directory of the source's files.
func (ms mountedSource) fromDir(reported string) string {
	return ms.sibling(reported, path.Dir(path.Join(ms.volume, cmp.Or(ms.rel, ms.caRel))))
}

// sibling maps the CA file into the form of reported, which names volume path suffix.
func (ms mountedSource) sibling(reported, suffix string) string {
	if ms.caFile == "" || ms.subPath || ms.caRel == "" {
		return ms.caFile
	}
	reported = throughData(reported)
	if reported == ms.file || reported == ms.dir || !strings.HasSuffix(reported, "/"+suffix) {
		return ms.caFile
	}
	return path.Join(strings.TrimSuffix(reported, "/"+suffix), ms.volume, ms.caRel)
}

func (ms mountedSource) isFile(uid, p string) bool { return ms.matches(uid, p, ms.file, ms.rel) }

func (ms mountedSource) isCAFile(uid, p string) bool { return ms.matches(uid, p, ms.caFile, ms.caRel) }

// matches says whether reported path p is the file at container path file (volume path rel).
func (ms mountedSource) matches(uid, p, file, rel string) bool {
	if file == "" {
		return false
	}
	p = throughData(p)
	if p == file {
		return true
	}
	return !ms.subPath && uid != "" && rel != "" && strings.Contains(p, uid) && strings.HasSuffix(p, "/"+path.Join(ms.volume, rel))
}

func (ms mountedSource) isDir(uid, p string) bool {
	p = throughData(p)
	if p == ms.dir {
		return true
	}
	rel := cmp.Or(ms.rel, ms.caRel)
	return !ms.subPath && uid != "" && rel != "" && strings.Contains(p, uid) && strings.HasSuffix(p, "/"+path.Dir(path.Join(ms.volume, rel)))
}

// throughData is a reported path with the kubelet's atomic-writer internals taken out: a config
// may name a Secret volume's file through its "..data" symlink or the timestamped directory
// "..data" points to (/certs/..data/tls.crt, /certs/..2026_11_26_02_41_36.123456789/tls.crt),
// which is the same file as /certs/tls.crt.
func throughData(p string) string {
	p = path.Clean(p)
	if !strings.Contains(p, "/..") {
		return p
	}
	parts := strings.Split(p, "/")
	out := parts[:0]
	for _, e := range parts {
		if e == "..data" || atomicWriterDirRE.MatchString(e) {
			continue
		}
		out = append(out, e)
	}
	return path.Clean(strings.Join(out, "/"))
}

// atomicWriterDirRE matches the timestamped directory names of the kubelet's atomic writer
// (pkg/volume/util/atomic_writer.go: os.MkdirTemp with "..2006_01_02_15_04_05." and a random
// suffix).
var atomicWriterDirRE = regexp.MustCompile(`^\.\.[0-9]{4}_[0-9]{2}_[0-9]{2}_[0-9]{2}_[0-9]{2}_[0-9]{2}\.[0-9]+$`)

// ListenerEndpoints are the TLS endpoints of a pod read from its Envoy's listeners, for pods
// that declare no certdrift.dev/probe-ports: one per TLS listener port, with the exact (not
// wildcard) server names of its filter chains as SNIs.
func ListenerEndpoints(podIP string, ls []envoystate.FilterChainTLS) []config.Endpoint {
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
			if n != "" && !strings.HasPrefix(n, "*") && !slices.Contains(snis[port], n) && len(snis[port]) < kube.MaxSNIsPerPort {
				snis[port] = append(snis[port], n)
			}
		}
		if len(ports) == kube.MaxProbePorts {
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

// ProbeEndpoints are the TLS endpoints to handshake with on a pod, whether or not its admin
// could be read: the certdrift.dev/probe-ports annotation when present; else the TLS listeners
// the admin's config_dump shows, when it was read; else the pod spec (SpecEndpoints). SNIs come
// from the annotation or the listeners' server names; the caller fills in the rest (the bound
// certificates' DNS names, else none).
func ProbeEndpoints(t kube.EnvoyTarget, snap *envoystate.Snapshot) []config.Endpoint {
	if len(t.ProbePorts) > 0 {
		return probeEndpoints(t)
	}
	if snap != nil && snap.ConfigErr == nil {
		return ListenerEndpoints(t.PodIP, snap.Listeners)
	}
	return SpecEndpoints(t)
}

// SpecEndpoints are the Envoy container's declared ports that look like TLS — named https, tls,
// ssl, grpcs or wss, or numbered …443 — other than its admin and stats ports, on the pod IP. A
// port with another name is left out: without the admin nothing says it speaks TLS, and a
// handshake with a plaintext listener would only report a failure.
func SpecEndpoints(t kube.EnvoyTarget) []config.Endpoint {
	if t.PodIP == "" {
		return nil
	}
	var ports []int
	for _, cp := range t.ContainerPorts {
		if cp.Port == t.AdminPort || cp.Port == t.StatsPort || slices.Contains(ports, cp.Port) || !tlsPort(cp) {
			continue
		}
		ports = append(ports, cp.Port)
	}
	slices.Sort(ports)
	var out []config.Endpoint
	for _, p := range ports {
		out = append(out, config.Endpoint{Address: net.JoinHostPort(t.PodIP, strconv.Itoa(p))})
	}
	return out
}

func tlsPort(cp kube.ContainerPort) bool {
	if cp.Port%1000 == 443 {
		return true
	}
	n := strings.ToLower(cp.Name)
	for _, w := range []string{"https", "tls", "ssl", "grpcs", "wss"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

func probeEndpoints(t kube.EnvoyTarget) []config.Endpoint {
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

// mountedSources resolves where each item of each Secret or ConfigMap source shows its
// certificate and CA bundle in the Envoy container (every container when the Envoy container is
// unknown), and which mounts are copies that never update.
func mountedSources(t kube.EnvoyTarget, keys SourceKeys) ([]mountedSource, []MountRisk) {
	vols := map[string]kube.PodVolume{}
	for _, v := range t.Volumes {
		vols[v.Name] = v
	}
	var out []mountedSource
	var risks []MountRisk
	// The mount paths of each container: a runtime mounts shallowest first, so a deeper mount
	// hides whatever a shallower volume has at that path (a subPath file over a Secret's
	// directory, a Secret mounted inside a ConfigMap's directory).
	mountPaths := map[string][]string{}
	for _, m := range t.Mounts {
		if m.MountPath != "" {
			mountPaths[m.Container] = append(mountPaths[m.Container], path.Clean(m.MountPath))
		}
	}
	for _, m := range t.Mounts {
		if t.EnvoyContainer != "" && m.Container != t.EnvoyContainer {
			continue
		}
		v, ok := vols[m.Volume]
		if !ok || m.MountPath == "" {
			continue
		}
		mountPath := path.Clean(m.MountPath)
		// The files known sources project into this volume: a source the desired view does not
		// hold (missing, unreadable, filtered out) is guessed to have the kubernetes.io/tls keys,
		// and the guess must not claim a file that another source of a projected volume writes.
		claimed := map[string]bool{}
		for _, src := range v.Sources {
			for _, ik := range keys[sourceName(t.Namespace, src)] {
				for _, k := range []string{ik.Cert, ik.Key, ik.CA} {
					if rel, ok := fileIn(src, k); ok {
						claimed[rel] = true
					}
				}
			}
		}
		for _, src := range v.Sources {
			if src.Name == "" || (src.Kind != "Secret" && src.Kind != "ConfigMap") {
				continue
			}
			source := sourceName(t.Namespace, src)
			_, known := keys[source]
			risk := MountRisk{Container: m.Container, Volume: m.Volume, MountPath: m.MountPath, Source: source}
			// A mount is a risk once, however many items of the source it shows.
			risky := false
			for _, ik := range keys.of(src.Kind, source) {
				rel, hasCert := fileIn(src, ik.Cert)
				caRel, hasCA := fileIn(src, ik.CA)
				keyRel, hasKey := fileIn(src, ik.Key)
				if !known {
					hasCert, hasCA, hasKey = hasCert && !claimed[rel], hasCA && !claimed[caRel], hasKey && !claimed[keyRel]
				}
				if !hasCert && !hasCA {
					continue
				}
				if m.SubPathExpr != "" {
					// The expansion depends on the container's environment, unknown here.
					risky = true
					risk.SubPath, risk.Reason = m.SubPathExpr, "subPathExpr mount: a copy made at container start that never updates"
					continue
				}
				ms := mountedSource{source: source, item: ik.Item, names: ik.Names, volume: m.Volume, token: v.Token}
				if m.SubPath != "" {
					sub := path.Clean(m.SubPath)
					if hasCert {
						ms.file, hasCert = underSubPath(mountPath, sub, rel)
					}
					if hasCA {
						ms.caFile, hasCA = underSubPath(mountPath, sub, caRel)
					}
					_, keyShown := underSubPath(mountPath, sub, keyRel)
					if !hasCert && !hasCA && !(hasKey && keyShown) {
						continue // none of this item's files is under the mounted subPath
					}
					risky = true
					risk.SubPath, risk.Reason = m.SubPath, "subPath mount: a copy made at container start that never updates"
					risk.File = cmp.Or(risk.File, ms.file)
					if !hasCert && !hasCA {
						continue // only the private key: nothing to bind
					}
					ms.subPath = true
					ms.dir = path.Dir(cmp.Or(ms.file, ms.caFile))
				} else {
					if hasCert {
						ms.file, ms.rel = path.Join(mountPath, rel), rel
					}
					if hasCA {
						ms.caFile, ms.caRel = path.Join(mountPath, caRel), caRel
					}
					ms.dir = path.Dir(cmp.Or(ms.file, ms.caFile))
				}
				if ms.subPath {
					ms.rel, ms.caRel = rel, caRel
				}
				if covered(mountPaths[m.Container], mountPath, ms.file) {
					ms.file, ms.rel = "", ""
				}
				if covered(mountPaths[m.Container], mountPath, ms.caFile) {
					ms.caFile, ms.caRel = "", ""
				}
				if ms.file == "" && ms.caFile == "" {
					continue // another mount hides both files: the container never sees them
				}
				ms.dir = path.Dir(cmp.Or(ms.file, ms.caFile))
				out = append(out, ms)
			}
			if risky {
				risks = append(risks, risk)
			}
		}
	}
	return out, risks
}

// covered says whether file, which the mount at own shows, is hidden by another of the
// container's mounts: one deeper than own at file or at a directory above it.
func covered(mountPaths []string, own, file string) bool {
	if file == "" {
		return false
	}
	for _, q := range mountPaths {
		if q == own || !(own == "/" || strings.HasPrefix(q, own+"/")) {
			continue
		}
		if file == q || strings.HasPrefix(file, q+"/") {
			return true
		}
	}
	return false
}

// sourceName is the desired source name of a volume source of a pod in namespace ns.
func sourceName(ns string, src kube.VolumeSource) string {
	if src.Kind == ref.ConfigMap {
		return ref.Source{Kind: ref.ConfigMap, Namespace: ns, Name: src.Name}.String()
	}
	return ref.Source{Kind: ref.Secret, Namespace: ns, Name: src.Name}.String()
}

// underSubPath is where volume path rel appears when the volume's sub is mounted at mountPath.
func underSubPath(mountPath, sub, rel string) (string, bool) {
	switch {
	case rel == "":
		return "", false
	case rel == sub:
		return mountPath, true
	case strings.HasPrefix(rel, sub+"/"):
		return path.Join(mountPath, strings.TrimPrefix(rel, sub+"/")), true
	}
	return "", false
}

// fileIn is the path of key inside the volume: the key itself, or its items mapping; false when
// key is "" or items are listed and leave the key out.
func fileIn(src kube.VolumeSource, key string) (string, bool) {
	if key == "" {
		return "", false
	}
	if len(src.Items) == 0 {
		return key, true
	}
	for _, it := range src.Items {
		if it.Key == key && it.Path != "" {
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
