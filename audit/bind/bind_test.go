package bind

import (
	"crypto/x509"
	"path"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/kube"
)

func secretVol(name, secret string, items ...kube.KeyPath) kube.PodVolume {
	return kube.PodVolume{Name: name, Sources: []kube.VolumeSource{{Kind: "Secret", Name: secret, Items: items}}}
}

func TestBind(t *testing.T) {
	cases := map[string]struct {
		reason string
		target kube.EnvoyTarget
		keys   SourceKeys
		want   PodBindings
	}{
		"SecretVolume": {
			reason: "a secret volume at /certs binds ns/secret to /certs/tls.crt and its CA to /certs/ca.crt, Dir /certs; probe ports become pod-IP endpoints",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p", PodIP: "10.0.0.1", EnvoyContainer: "envoy",
				ProbePorts: []kube.ProbePort{{Port: 8443, SNIs: []string{"web.example.com"}}, {Port: 9443}},
				Volumes:    []kube.PodVolume{secretVol("tls", "web-tls")},
				Mounts:     []kube.VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/certs/"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p",
				Endpoints: []config.Endpoint{{Address: "10.0.0.1:8443", SNI: []string{"web.example.com"}}, {Address: "10.0.0.1:9443"}},
				Bindings:  []config.Binding{{Source: "a/web-tls", File: "/certs/tls.crt", CAFile: "/certs/ca.crt", Dir: "/certs", Origin: audit.OriginPath}}}},
		},
		"ItemsMapping": {
			reason: "items move the certificate key to another file name; a CA key they leave out has no CAFile",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []kube.PodVolume{secretVol("tls", "web-tls", kube.KeyPath{Key: "tls.key", Path: "key.pem"}, kube.KeyPath{Key: "tls.crt", Path: "sub/cert.pem"})},
				Mounts:  []kube.VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/etc/tls"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p",
				Bindings: []config.Binding{{Source: "a/web-tls", File: "/etc/tls/sub/cert.pem", Dir: "/etc/tls/sub", Origin: audit.OriginPath}}}},
		},
		"ItemsOnlyCA": {
			reason: "items that map only ca.crt bind the CA file alone: the pod's trust comes from this Secret",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []kube.PodVolume{secretVol("tls", "web-tls", kube.KeyPath{Key: "ca.crt", Path: "ca.pem"})},
				Mounts:  []kube.VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/etc/tls"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p",
				Bindings: []config.Binding{{Source: "a/web-tls", CAFile: "/etc/tls/ca.pem", Dir: "/etc/tls", Origin: audit.OriginPath}}}},
		},
		"ItemsNeither": {
			reason: "items that map neither the certificate nor the CA bind nothing",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []kube.PodVolume{secretVol("tls", "web-tls", kube.KeyPath{Key: "tls.key", Path: "key.pem"})},
				Mounts:  []kube.VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/etc/tls"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p"}},
		},
		"Projected": {
			reason: "each Secret source of a projected volume binds; a ConfigMap source binds its bundle keys, one item each",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []kube.PodVolume{{Name: "all", Sources: []kube.VolumeSource{
					{Kind: "Secret", Name: "one", Items: []kube.KeyPath{{Key: "tls.crt", Path: "one.crt"}}},
					{Kind: "ConfigMap", Name: "bundle"},
					{Kind: "Secret", Name: "two", Items: []kube.KeyPath{{Key: "tls.crt", Path: "two.crt"}}},
				}}},
				Mounts: []kube.VolumeMount{{Container: "envoy", Volume: "all", MountPath: "/tls"}}},
			keys: SourceKeys{"configmap:a/bundle": {{Item: "root.pem", CA: "root.pem"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p", Bindings: []config.Binding{
				{Source: "a/one", File: "/tls/one.crt", Dir: "/tls", Origin: audit.OriginPath},
				{Source: "configmap:a/bundle", Item: "root.pem", CAFile: "/tls/root.pem", Dir: "/tls", Origin: audit.OriginPath},
				{Source: "a/two", File: "/tls/two.crt", Dir: "/tls", Origin: audit.OriginPath}}}},
		},
		"ProjectedTLSAndCASecret": {
			reason: "a projected volume of a TLS Secret and a CA-only Secret binds both: the leaf's source and the trust's source, each with the files it shows",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []kube.PodVolume{{Name: "tls", Sources: []kube.VolumeSource{
					{Kind: "Secret", Name: "web-tls", Items: []kube.KeyPath{{Key: "tls.crt", Path: "tls.crt"}, {Key: "tls.key", Path: "tls.key"}}},
					{Kind: "Secret", Name: "web-ca"},
				}}},
				Mounts: []kube.VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/etc/envoy/tls"}}},
			keys: SourceKeys{"a/web-tls": {{Cert: "tls.crt", Key: "tls.key", CA: "ca.crt"}}, "a/web-ca": {{CA: "ca.crt"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p", Bindings: []config.Binding{
				{Source: "a/web-tls", File: "/etc/envoy/tls/tls.crt", Dir: "/etc/envoy/tls", Origin: audit.OriginPath},
				{Source: "a/web-ca", CAFile: "/etc/envoy/tls/ca.crt", Dir: "/etc/envoy/tls", Origin: audit.OriginPath}}}},
		},
		"ProjectedUnknownSource": {
			reason: "a projected Secret the desired view does not hold is guessed to have tls.crt and ca.crt, but not where a known source of the volume writes them",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []kube.PodVolume{{Name: "tls", Sources: []kube.VolumeSource{
					{Kind: "Secret", Name: "web-tls"},
					{Kind: "Secret", Name: "missing", Optional: true},
				}}},
				Mounts: []kube.VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/certs"}}},
			keys: SourceKeys{"a/web-tls": {{Cert: "tls.crt", Key: "tls.key"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p", Bindings: []config.Binding{
				{Source: "a/web-tls", File: "/certs/tls.crt", Dir: "/certs", Origin: audit.OriginPath},
				{Source: "a/missing", CAFile: "/certs/ca.crt", Dir: "/certs", Origin: audit.OriginPath}}}},
		},
		"LayoutKeys": {
			reason: "an Opaque Secret read with a layout binds the layout's keys, and a merged layout one binding per item",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []kube.PodVolume{secretVol("g", "istio-generic"), secretVol("m", "merged")},
				Mounts:  []kube.VolumeMount{{Container: "envoy", Volume: "g", MountPath: "/g"}, {Container: "envoy", Volume: "m", MountPath: "/m"}}},
			keys: SourceKeys{"a/istio-generic": {{Cert: "cert", Key: "key", CA: "cacert"}},
				"a/merged": {{Item: "x", Cert: "x.crt", Key: "x.key", CA: "ca.crt"}, {Item: "y", Cert: "y.crt"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p", Bindings: []config.Binding{
				{Source: "a/istio-generic", File: "/g/cert", CAFile: "/g/cacert", Dir: "/g", Origin: audit.OriginPath},
				{Source: "a/merged", Item: "x", File: "/m/x.crt", CAFile: "/m/ca.crt", Dir: "/m", Origin: audit.OriginPath},
				{Source: "a/merged", Item: "y", File: "/m/y.crt", Dir: "/m", Origin: audit.OriginPath}}}},
		},
		"ConfigMapWithoutBundle": {
			reason: "a ConfigMap the inventory holds no bundle of (Envoy's bootstrap) binds nothing and is no risk, subPath or not",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []kube.PodVolume{{Name: "config", Sources: []kube.VolumeSource{{Kind: "ConfigMap", Name: "envoy-config"}}}},
				Mounts:  []kube.VolumeMount{{Container: "envoy", Volume: "config", MountPath: "/etc/envoy/envoy.yaml", SubPath: "envoy.yaml"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p"}},
		},
		"SubPathIsRisk": {
			reason: "a subPath mount binds the file it shows and is reported as never updating",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []kube.PodVolume{secretVol("tls", "web-tls")},
				Mounts:  []kube.VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/etc/envoy/cert.pem", SubPath: "tls.crt"}}},
			want: PodBindings{
				Envoy: config.Envoy{Name: "a/p", Bindings: []config.Binding{{Source: "a/web-tls", File: "/etc/envoy/cert.pem", Dir: "/etc/envoy", Origin: audit.OriginPath}}},
				Risks: []MountRisk{{Container: "envoy", Volume: "tls", MountPath: "/etc/envoy/cert.pem", SubPath: "tls.crt",
					Source: "a/web-tls", File: "/etc/envoy/cert.pem", Reason: "subPath mount: a copy made at container start that never updates"}}},
		},
		"SubPathMountsEachARisk": {
			reason: "three subPath mounts of one Secret (certificate, key, CA) are three risks, one per mount; the certificate and CA bind where they show",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []kube.PodVolume{secretVol("tls", "web-tls")},
				Mounts: []kube.VolumeMount{
					{Container: "envoy", Volume: "tls", MountPath: "/etc/envoy/cert.pem", SubPath: "tls.crt"},
					{Container: "envoy", Volume: "tls", MountPath: "/etc/envoy/key.pem", SubPath: "tls.key"},
					{Container: "envoy", Volume: "tls", MountPath: "/etc/envoy/ca.pem", SubPath: "ca.crt"}}},
			want: PodBindings{
				Envoy: config.Envoy{Name: "a/p", Bindings: []config.Binding{
					{Source: "a/web-tls", File: "/etc/envoy/cert.pem", Dir: "/etc/envoy", Origin: audit.OriginPath},
					{Source: "a/web-tls", CAFile: "/etc/envoy/ca.pem", Dir: "/etc/envoy", Origin: audit.OriginPath}}},
				Risks: []MountRisk{
					{Container: "envoy", Volume: "tls", MountPath: "/etc/envoy/cert.pem", SubPath: "tls.crt",
						Source: "a/web-tls", File: "/etc/envoy/cert.pem", Reason: "subPath mount: a copy made at container start that never updates"},
					{Container: "envoy", Volume: "tls", MountPath: "/etc/envoy/key.pem", SubPath: "tls.key",
						Source: "a/web-tls", Reason: "subPath mount: a copy made at container start that never updates"},
					{Container: "envoy", Volume: "tls", MountPath: "/etc/envoy/ca.pem", SubPath: "ca.crt",
						Source: "a/web-tls", Reason: "subPath mount: a copy made at container start that never updates"}}},
		},
		"SubPathOfUnrelatedKey": {
			reason: "a subPath mount of a key that is neither certificate, private key nor CA is no certificate risk",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []kube.PodVolume{secretVol("tls", "web-tls")},
				Mounts:  []kube.VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/token", SubPath: "token"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p"}},
		},
		"SubPathExpr": {
			reason: "a subPathExpr cannot be resolved: risk only",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []kube.PodVolume{secretVol("tls", "web-tls")},
				Mounts:  []kube.VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/x", SubPathExpr: "$(POD)"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p"}, Risks: []MountRisk{{Container: "envoy", Volume: "tls", MountPath: "/x",
				SubPath: "$(POD)", Source: "a/web-tls", Reason: "subPathExpr mount: a copy made at container start that never updates"}}},
		},
		"OtherContainer": {
			reason: "mounts into a container that is not Envoy bind nothing",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p", EnvoyContainer: "envoy",
				Volumes: []kube.PodVolume{secretVol("tls", "web-tls")},
				Mounts:  []kube.VolumeMount{{Container: "app", Volume: "tls", MountPath: "/certs"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p"}},
		},
		"Declared": {
			reason: "declared Secrets bind without a location, once, with the explicit origin; a mounted one is not repeated and keeps the explicit origin",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p", DeclaredSecrets: []string{"a/web-tls", "b/other"},
				Volumes: []kube.PodVolume{secretVol("tls", "web-tls")},
				Mounts:  []kube.VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/certs"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p", Bindings: []config.Binding{
				{Source: "a/web-tls", File: "/certs/tls.crt", CAFile: "/certs/ca.crt", Dir: "/certs", Origin: audit.OriginConfig}, {Source: "b/other", Origin: audit.OriginConfig}}}},
		},
		"ServiceAccountTokenVolume": {
			reason: "the kube-api-access volume's kube-root-ca.crt is the API server's CA, not Envoy's trust: no binding from the spec",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []kube.PodVolume{{Name: "kube-api-access-x", Token: true, Sources: []kube.VolumeSource{{Kind: "ConfigMap", Name: "kube-root-ca.crt",
					Items: []kube.KeyPath{{Key: "ca.crt", Path: "ca.crt"}}}}}},
				Mounts: []kube.VolumeMount{{Container: "envoy", Volume: "kube-api-access-x", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}},
			keys: SourceKeys{"configmap:a/kube-root-ca.crt": {{Item: "ca.crt", CA: "ca.crt"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p"}},
		},
		"NoPodIP": {
			reason: "without a pod IP there is nothing to handshake with",
			target: kube.EnvoyTarget{Namespace: "a", Pod: "p", ProbePorts: []kube.ProbePort{{Port: 8443}}},
			want:   PodBindings{Envoy: config.Envoy{Name: "a/p"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Bind(tc.target, tc.keys)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nBind(): -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestLoadedBindings(t *testing.T) {
	target := kube.EnvoyTarget{Namespace: "a", Pod: "p", UID: "0f1e-uid",
		Volumes: []kube.PodVolume{secretVol("tls", "web-tls"), secretVol("other", "other-tls"), secretVol("sub", "sub-tls")},
		Mounts: []kube.VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/certs"},
			{Container: "envoy", Volume: "other", MountPath: "/other"},
			{Container: "envoy", Volume: "sub", MountPath: "/s.pem", SubPath: "tls.crt"}}}
	node := "/var/lib/kubelet/pods/0f1e-uid/volumes/kubernetes.io~secret"
	cases := map[string]struct {
		reason string
		snap   *envoystate.Snapshot
		keys   SourceKeys
		want   []config.Binding
	}{
		"WatchedDir": {
			reason: "a file-based SDS secret watching the mount binds the mounted Secret under its SDS name",
			snap:   &envoystate.Snapshot{Secrets: []envoystate.Secret{{Name: "web", HasCertificate: true, WatchedDir: "/certs/"}}},
			want:   []config.Binding{{Source: "a/web-tls", Secret: "web", CAFile: "/certs/ca.crt", Dir: "/certs", Origin: audit.OriginPath}},
		},
		"CertFile": {
			reason: "a secret naming the mounted file binds under both",
			snap:   &envoystate.Snapshot{Secrets: []envoystate.Secret{{Name: "o", HasCertificate: true, CertFile: "/other/tls.crt"}}},
			want:   []config.Binding{{Source: "a/other-tls", Secret: "o", File: "/other/tls.crt", CAFile: "/other/ca.crt", Dir: "/other", Origin: audit.OriginPath}},
		},
		"NodePaths": {
			reason: "paths on the node, under the pod's UID and ending in volume/file, name the same mounts",
			snap: &envoystate.Snapshot{
				Secrets:   []envoystate.Secret{{Name: "web", HasCertificate: true, WatchedDir: node + "/tls"}},
				Contexts:  []envoystate.TLSContext{{Chain: []envoystate.CertDetail{{Path: node + "/other/tls.crt"}, {Path: "<inline>"}}}},
				Listeners: []envoystate.FilterChainTLS{{CertFiles: []string{node + "/other/tls.crt"}}},
			},
			want: []config.Binding{
				{Source: "a/web-tls", Secret: "web", CAFile: node + "/tls/ca.crt", Dir: node + "/tls", Origin: audit.OriginPath},
				{Source: "a/other-tls", File: node + "/other/tls.crt", CAFile: node + "/other/ca.crt", Dir: node + "/other", Origin: audit.OriginPath}},
		},
		"OtherPodsNodePath": {
			reason: "a node path of another pod (other UID) binds nothing",
			snap: &envoystate.Snapshot{Contexts: []envoystate.TLSContext{{Chain: []envoystate.CertDetail{
				{Path: "/var/lib/kubelet/pods/other-uid/volumes/kubernetes.io~secret/other/tls.crt"}}}}},
		},
		"SubPathOnlyAsMounted": {
			reason: "a subPath copy is matched by its container path only",
			snap: &envoystate.Snapshot{Contexts: []envoystate.TLSContext{{Chain: []envoystate.CertDetail{
				{Path: "/s.pem"}, {Path: node + "/sub/tls.crt"}}}}},
			want: []config.Binding{{Source: "a/sub-tls", File: "/s.pem", Dir: "/", Origin: audit.OriginPath}},
		},
		"Unrelated": {
			reason: "secrets of other directories bind nothing",
			snap: &envoystate.Snapshot{Secrets: []envoystate.Secret{{Name: "ca", HasValidation: true, WatchedDir: "/elsewhere"},
				{Name: "x", HasCertificate: true, WatchedDir: "/elsewhere"}}},
		},
		"ValidationWatchedDir": {
			reason: "a validation secret watching the mount of a Secret with a CA binds that Secret's trust under the validation secret's name",
			snap:   &envoystate.Snapshot{Secrets: []envoystate.Secret{{Name: "ca", HasValidation: true, WatchedDir: "/certs"}}},
			want:   []config.Binding{{Source: "a/web-tls", Secret: "ca", CAFile: "/certs/ca.crt", Dir: "/certs", Origin: audit.OriginPath}},
		},
		"ValidationCAFile": {
			reason: "a CA file Envoy reports (/certs ca_cert on the node, a secret's trusted_ca, a listener's) binds the source holding it, as reported",
			snap: &envoystate.Snapshot{
				Contexts:  []envoystate.TLSContext{{CA: []envoystate.CertDetail{{Path: node + "/other/ca.crt"}}}},
				Secrets:   []envoystate.Secret{{Name: "v", HasValidation: true, CAFile: "/certs/ca.crt"}},
				Listeners: []envoystate.FilterChainTLS{{CAFile: "/certs/ca.crt"}, {CAFile: "/etc/ssl/ca.pem"}},
			},
			want: []config.Binding{
				{Source: "a/web-tls", Secret: "v", CAFile: "/certs/ca.crt", Dir: "/certs", Origin: audit.OriginPath},
				{Source: "a/other-tls", CAFile: node + "/other/ca.crt", Dir: node + "/other", Origin: audit.OriginPath},
				{Source: "a/web-tls", CAFile: "/certs/ca.crt", Dir: "/certs", Origin: audit.OriginPath}},
		},
		"ListenerSDSWatchedDir": {
			reason: "a listener's file-based SDS watching the mount binds the Secret under the SDS name, though the dumped secret (inlined by Envoy 1.40) names no file or directory",
			snap: &envoystate.Snapshot{
				Secrets: []envoystate.Secret{{Name: "server_cert", HasCertificate: true}},
				Listeners: []envoystate.FilterChainTLS{{SDSCertNames: []string{"server_cert", "ads"},
					SDSCertSources: []envoystate.SDSSource{{Name: "server_cert", Path: "/etc/envoy/sds.yaml", WatchedDir: "/certs"}}}},
			},
			want: []config.Binding{{Source: "a/web-tls", Secret: "server_cert", CAFile: "/certs/ca.crt", Dir: "/certs", Origin: audit.OriginPath}},
		},
		"ListenerSDSResourceInMount": {
			reason: "an SDS resource file read from the mount (node path here) binds that Secret; a source elsewhere binds nothing",
			snap: &envoystate.Snapshot{Listeners: []envoystate.FilterChainTLS{{SDSCertSources: []envoystate.SDSSource{
				{Name: "o", Path: node + "/other/sds.yaml"},
				{Name: "x", Path: "/etc/envoy/sds.yaml", WatchedDir: "/etc/envoy"},
				{Name: "y", WatchedDir: "/var/lib/kubelet/pods/other-uid/volumes/kubernetes.io~secret/tls"},
			}}}},
			want: []config.Binding{{Source: "a/other-tls", Secret: "o", CAFile: node + "/other/ca.crt", Dir: node + "/other", Origin: audit.OriginPath}},
		},
		"ListenerSDSSameAsSecret": {
			reason: "the listener and the dumped secret agreeing yield one binding",
			snap: &envoystate.Snapshot{
				Secrets:   []envoystate.Secret{{Name: "web", HasCertificate: true, WatchedDir: "/certs"}},
				Listeners: []envoystate.FilterChainTLS{{SDSCertSources: []envoystate.SDSSource{{Name: "web", WatchedDir: "/certs"}}}},
			},
			want: []config.Binding{{Source: "a/web-tls", Secret: "web", CAFile: "/certs/ca.crt", Dir: "/certs", Origin: audit.OriginPath}},
		},
		"NoSnapshot": {reason: "no admin, no loaded bindings"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := LoadedBindings(target, tc.keys, tc.snap)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nLoadedBindings(): -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestLoadedBindingsProjectedTrust: a projected volume of a TLS Secret and a CA-only Secret,
// read by file-based SDS from the node (the testbed's rewrite): the certificate secret binds the
// TLS Secret only, the validation secret (by its listener's watched directory) the CA Secret only,
// with the CA file as the node shows it.
// TestLoadedBindingsMergedDir: SDS secrets watching the directory of a merged Secret (a.crt,
// b.crt) cannot say which item they hold: the source is bound with no item, for the audit to
// match by certificate; a file path does say.
func TestLoadedBindingsMergedDir(t *testing.T) {
	target := kube.EnvoyTarget{Namespace: "a", Pod: "p", Volumes: []kube.PodVolume{secretVol("certs", "merged")},
		Mounts: []kube.VolumeMount{{Container: "envoy", Volume: "certs", MountPath: "/certs"}}}
	keys := SourceKeys{"a/merged": {{Item: "a", Cert: "a.crt", Key: "a.key", CA: "ca.crt"}, {Item: "b", Cert: "b.crt", Key: "b.key", CA: "ca.crt"}}}
	snap := &envoystate.Snapshot{
		Secrets:  []envoystate.Secret{{Name: "a.example", HasCertificate: true, WatchedDir: "/certs"}, {Name: "ca", HasValidation: true, WatchedDir: "/certs"}},
		Contexts: []envoystate.TLSContext{{Chain: []envoystate.CertDetail{{Path: "/certs/b.crt"}}}},
	}
	want := []config.Binding{
		{Source: "a/merged", Secret: "a.example", CAFile: "/certs/ca.crt", Dir: "/certs", Origin: audit.OriginPath},
		{Source: "a/merged", Secret: "ca", CAFile: "/certs/ca.crt", Dir: "/certs", Origin: audit.OriginPath},
		{Source: "a/merged", Item: "b", File: "/certs/b.crt", CAFile: "/certs/ca.crt", Dir: "/certs", Origin: audit.OriginPath},
	}
	if diff := cmp.Diff(want, LoadedBindings(target, keys, snap)); diff != "" {
		t.Errorf("LoadedBindings(): -want +got:\n%s", diff)
	}

	// With the items' names known, the certificate Envoy inlined (file-based SDS in Envoy 1.40)
	// picks the item; one whose names match no item, or several, stays item-less.
	keys["a/merged"][0].Names = []string{"a.example"}
	keys["a/merged"][1].Names = []string{"b.example"}
	snap = &envoystate.Snapshot{Secrets: []envoystate.Secret{
		{Name: "a.example", HasCertificate: true, WatchedDir: "/certs", Chain: []*x509.Certificate{{DNSNames: []string{"a.example"}}}},
		{Name: "other", HasCertificate: true, Chain: []*x509.Certificate{{DNSNames: []string{"c.example"}}}},
	}, Listeners: []envoystate.FilterChainTLS{{SDSCertSources: []envoystate.SDSSource{{Name: "other", WatchedDir: "/certs"}}}}}
	want = []config.Binding{
		{Source: "a/merged", Item: "a", Secret: "a.example", CAFile: "/certs/ca.crt", Dir: "/certs", Origin: audit.OriginPath},
		{Source: "a/merged", Secret: "other", CAFile: "/certs/ca.crt", Dir: "/certs", Origin: audit.OriginPath},
	}
	if diff := cmp.Diff(want, LoadedBindings(target, keys, snap)); diff != "" {
		t.Errorf("LoadedBindings(names known): -want +got:\n%s", diff)
	}
}

// TestLoadedBindingsTokenCA: the API server's CA in the service account token volume binds only
// when Envoy reports reading it (a validation context that trusts the API server).
func TestLoadedBindingsTokenCA(t *testing.T) {
	target := kube.EnvoyTarget{Namespace: "a", Pod: "p", UID: "0f1e-uid",
		Volumes: []kube.PodVolume{{Name: "kube-api-access-x", Token: true, Sources: []kube.VolumeSource{{Kind: "ConfigMap", Name: "kube-root-ca.crt",
			Items: []kube.KeyPath{{Key: "ca.crt", Path: "ca.crt"}}}}}},
		Mounts: []kube.VolumeMount{{Container: "envoy", Volume: "kube-api-access-x", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}}
	keys := SourceKeys{"configmap:a/kube-root-ca.crt": {{Item: "ca.crt", CA: "ca.crt"}}}
	const ca = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
	if got := LoadedBindings(target, keys, &envoystate.Snapshot{}); len(got) != 0 {
		t.Errorf("LoadedBindings(nothing reported) = %v, want none", got)
	}
	got := LoadedBindings(target, keys, &envoystate.Snapshot{Listeners: []envoystate.FilterChainTLS{{CAFile: ca}}})
	want := []config.Binding{{Source: "configmap:a/kube-root-ca.crt", Item: "ca.crt", CAFile: ca, Dir: path.Dir(ca), Origin: audit.OriginPath}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LoadedBindings(CA file reported): -want +got:\n%s", diff)
	}
}

func TestLoadedBindingsProjectedTrust(t *testing.T) {
	target := kube.EnvoyTarget{Namespace: "a", Pod: "p", UID: "0f1e-uid",
		Volumes: []kube.PodVolume{{Name: "tls", Sources: []kube.VolumeSource{
			{Kind: "Secret", Name: "web-tls", Items: []kube.KeyPath{{Key: "tls.crt", Path: "tls.crt"}, {Key: "tls.key", Path: "tls.key"}}},
			{Kind: "Secret", Name: "web-ca"}}}},
		Mounts: []kube.VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/etc/envoy/tls"}}}
	keys := SourceKeys{"a/web-tls": {{Cert: "tls.crt", Key: "tls.key", CA: "ca.crt"}}, "a/web-ca": {{CA: "ca.crt"}}}
	dir := "/tmp/node/pods/a_p_0f1e-uid/volumes/tls"
	snap := &envoystate.Snapshot{
		Secrets: []envoystate.Secret{{Name: "server_cert", HasCertificate: true}, {Name: "client_ca", HasValidation: true}},
		Listeners: []envoystate.FilterChainTLS{{
			SDSCertNames:        []string{"server_cert"},
			SDSCertSources:      []envoystate.SDSSource{{Name: "server_cert", Path: "/tmp/rendered/sds.yaml", WatchedDir: dir}},
			SDSValidationName:   "client_ca",
			SDSValidationSource: &envoystate.SDSSource{Name: "client_ca", Path: "/tmp/rendered/ca.yaml", WatchedDir: dir},
		}},
	}
	want := []config.Binding{
		{Source: "a/web-tls", Secret: "server_cert", Dir: dir, Origin: audit.OriginPath},
		{Source: "a/web-ca", Secret: "client_ca", CAFile: dir + "/ca.crt", Dir: dir, Origin: audit.OriginPath},
	}
	if diff := cmp.Diff(want, LoadedBindings(target, keys, snap), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("LoadedBindings(): -want +got:\n%s", diff)
	}
}

func TestListenerEndpoints(t *testing.T) {
	ls := []envoystate.FilterChainTLS{
		{Address: "0.0.0.0:8443", ServerNames: []string{"a.example", "*.example"}},
		{Address: "0.0.0.0:8443", ServerNames: []string{"b.example", "a.example"}},
		{Address: "[::]:9443"},
		{Address: "not-an-address"},
		{Address: "0.0.0.0:0"},
	}
	got := ListenerEndpoints("10.1.2.3", ls)
	want := []config.Endpoint{
		{Address: "10.1.2.3:8443", SNI: []string{"a.example", "b.example"}},
		{Address: "10.1.2.3:9443"},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("ListenerEndpoints(): -want +got:\n%s", diff)
	}
	if got := ListenerEndpoints("", ls); len(got) != 0 {
		t.Errorf("ListenerEndpoints without pod IP = %v, want none", got)
	}
}
