package kube

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/envoyadmin"
)

func secretVol(name, secret string, items ...KeyPath) PodVolume {
	return PodVolume{Name: name, Sources: []VolumeSource{{Kind: "Secret", Name: secret, Items: items}}}
}

func TestBind(t *testing.T) {
	cases := map[string]struct {
		reason string
		target EnvoyTarget
		want   PodBindings
	}{
		"SecretVolume": {
			reason: "a secret volume at /certs binds ns/secret to /certs/tls.crt; probe ports become pod-IP endpoints",
			target: EnvoyTarget{Namespace: "a", Pod: "p", PodIP: "10.0.0.1", EnvoyContainer: "envoy",
				ProbePorts: []ProbePort{{Port: 8443, SNIs: []string{"web.example.com"}}, {Port: 9443}},
				Volumes:    []PodVolume{secretVol("tls", "web-tls")},
				Mounts:     []VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/certs/"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p",
				Endpoints: []config.Endpoint{{Address: "10.0.0.1:8443", SNI: []string{"web.example.com"}}, {Address: "10.0.0.1:9443"}},
				Bindings:  []config.Binding{{Source: "a/web-tls", File: "/certs/tls.crt", Origin: OriginPath}}}},
		},
		"ItemsMapping": {
			reason: "items move the certificate key to another file name",
			target: EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []PodVolume{secretVol("tls", "web-tls", KeyPath{Key: "tls.key", Path: "key.pem"}, KeyPath{Key: "tls.crt", Path: "sub/cert.pem"})},
				Mounts:  []VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/etc/tls"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p",
				Bindings: []config.Binding{{Source: "a/web-tls", File: "/etc/tls/sub/cert.pem", Origin: OriginPath}}}},
		},
		"ItemsWithoutCert": {
			reason: "items that leave tls.crt out bind nothing",
			target: EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []PodVolume{secretVol("tls", "web-tls", KeyPath{Key: "ca.crt", Path: "ca.pem"})},
				Mounts:  []VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/etc/tls"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p"}},
		},
		"Projected": {
			reason: "each Secret source of a projected volume binds; ConfigMap sources do not",
			target: EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []PodVolume{{Name: "all", Sources: []VolumeSource{
					{Kind: "Secret", Name: "one", Items: []KeyPath{{Key: "tls.crt", Path: "one.crt"}}},
					{Kind: "ConfigMap", Name: "bundle"},
					{Kind: "Secret", Name: "two", Items: []KeyPath{{Key: "tls.crt", Path: "two.crt"}}},
				}}},
				Mounts: []VolumeMount{{Container: "envoy", Volume: "all", MountPath: "/tls"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p", Bindings: []config.Binding{
				{Source: "a/one", File: "/tls/one.crt", Origin: OriginPath}, {Source: "a/two", File: "/tls/two.crt", Origin: OriginPath}}}},
		},
		"SubPathIsRisk": {
			reason: "a subPath mount binds the file it shows and is reported as never updating",
			target: EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []PodVolume{secretVol("tls", "web-tls")},
				Mounts:  []VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/etc/envoy/cert.pem", SubPath: "tls.crt"}}},
			want: PodBindings{
				Envoy: config.Envoy{Name: "a/p", Bindings: []config.Binding{{Source: "a/web-tls", File: "/etc/envoy/cert.pem", Origin: OriginPath}}},
				Risks: []MountRisk{{Container: "envoy", Volume: "tls", MountPath: "/etc/envoy/cert.pem", SubPath: "tls.crt",
					Source: "a/web-tls", File: "/etc/envoy/cert.pem", Reason: "subPath mount: a copy made at container start that never updates"}}},
		},
		"SubPathOfOtherKey": {
			reason: "a subPath mount of the key file does not show the certificate",
			target: EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []PodVolume{secretVol("tls", "web-tls")},
				Mounts:  []VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/k.pem", SubPath: "tls.key"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p"}},
		},
		"SubPathExpr": {
			reason: "a subPathExpr cannot be resolved: risk only",
			target: EnvoyTarget{Namespace: "a", Pod: "p",
				Volumes: []PodVolume{secretVol("tls", "web-tls")},
				Mounts:  []VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/x", SubPathExpr: "$(POD)"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p"}, Risks: []MountRisk{{Container: "envoy", Volume: "tls", MountPath: "/x",
				SubPath: "$(POD)", Source: "a/web-tls", Reason: "subPathExpr mount: a copy made at container start that never updates"}}},
		},
		"OtherContainer": {
			reason: "mounts into a container that is not Envoy bind nothing",
			target: EnvoyTarget{Namespace: "a", Pod: "p", EnvoyContainer: "envoy",
				Volumes: []PodVolume{secretVol("tls", "web-tls")},
				Mounts:  []VolumeMount{{Container: "app", Volume: "tls", MountPath: "/certs"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p"}},
		},
		"Declared": {
			reason: "declared Secrets bind without a location, once, with the explicit origin; a mounted one is not repeated and keeps the explicit origin",
			target: EnvoyTarget{Namespace: "a", Pod: "p", DeclaredSecrets: []string{"a/web-tls", "b/other"},
				Volumes: []PodVolume{secretVol("tls", "web-tls")},
				Mounts:  []VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/certs"}}},
			want: PodBindings{Envoy: config.Envoy{Name: "a/p", Bindings: []config.Binding{
				{Source: "a/web-tls", File: "/certs/tls.crt", Origin: OriginConfig}, {Source: "b/other", Origin: OriginConfig}}}},
		},
		"NoPodIP": {
			reason: "without a pod IP there is nothing to handshake with",
			target: EnvoyTarget{Namespace: "a", Pod: "p", ProbePorts: []ProbePort{{Port: 8443}}},
			want:   PodBindings{Envoy: config.Envoy{Name: "a/p"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Bind(tc.target, "")
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nBind(): -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestLoadedBindings(t *testing.T) {
	target := EnvoyTarget{Namespace: "a", Pod: "p", UID: "0f1e-uid",
		Volumes: []PodVolume{secretVol("tls", "web-tls"), secretVol("other", "other-tls"), secretVol("sub", "sub-tls")},
		Mounts: []VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/certs"},
			{Container: "envoy", Volume: "other", MountPath: "/other"},
			{Container: "envoy", Volume: "sub", MountPath: "/s.pem", SubPath: "tls.crt"}}}
	node := "/var/lib/kubelet/pods/0f1e-uid/volumes/kubernetes.io~secret"
	cases := map[string]struct {
		reason string
		snap   *envoyadmin.Snapshot
		want   []config.Binding
	}{
		"WatchedDir": {
			reason: "a file-based SDS secret watching the mount binds the mounted Secret under its SDS name",
			snap:   &envoyadmin.Snapshot{Secrets: []envoyadmin.Secret{{Name: "web", HasCertificate: true, WatchedDir: "/certs/"}}},
			want:   []config.Binding{{Source: "a/web-tls", Secret: "web", Origin: OriginPath}},
		},
		"CertFile": {
			reason: "a secret naming the mounted file binds under both",
			snap:   &envoyadmin.Snapshot{Secrets: []envoyadmin.Secret{{Name: "o", HasCertificate: true, CertFile: "/other/tls.crt"}}},
			want:   []config.Binding{{Source: "a/other-tls", Secret: "o", File: "/other/tls.crt", Origin: OriginPath}},
		},
		"NodePaths": {
			reason: "paths on the node, under the pod's UID and ending in volume/file, name the same mounts",
			snap: &envoyadmin.Snapshot{
				Secrets:   []envoyadmin.Secret{{Name: "web", HasCertificate: true, WatchedDir: node + "/tls"}},
				Contexts:  []envoyadmin.TLSContext{{Chain: []envoyadmin.CertDetail{{Path: node + "/other/tls.crt"}, {Path: "<inline>"}}}},
				Listeners: []envoyadmin.FilterChainTLS{{CertFiles: []string{node + "/other/tls.crt"}}},
			},
			want: []config.Binding{{Source: "a/web-tls", Secret: "web", Origin: OriginPath}, {Source: "a/other-tls", File: node + "/other/tls.crt", Origin: OriginPath}},
		},
		"OtherPodsNodePath": {
			reason: "a node path of another pod (other UID) binds nothing",
			snap: &envoyadmin.Snapshot{Contexts: []envoyadmin.TLSContext{{Chain: []envoyadmin.CertDetail{
				{Path: "/var/lib/kubelet/pods/other-uid/volumes/kubernetes.io~secret/other/tls.crt"}}}}},
		},
		"SubPathOnlyAsMounted": {
			reason: "a subPath copy is matched by its container path only",
			snap: &envoyadmin.Snapshot{Contexts: []envoyadmin.TLSContext{{Chain: []envoyadmin.CertDetail{
				{Path: "/s.pem"}, {Path: node + "/sub/tls.crt"}}}}},
			want: []config.Binding{{Source: "a/sub-tls", File: "/s.pem", Origin: OriginPath}},
		},
		"Unrelated": {
			reason: "validation-only secrets and other directories bind nothing",
			snap: &envoyadmin.Snapshot{Secrets: []envoyadmin.Secret{{Name: "ca", HasValidation: true, WatchedDir: "/certs"},
				{Name: "x", HasCertificate: true, WatchedDir: "/elsewhere"}}},
		},
		"ListenerSDSWatchedDir": {
			reason: "a listener's file-based SDS watching the mount binds the Secret under the SDS name, though the dumped secret (inlined by Envoy 1.40) names no file or directory",
			snap: &envoyadmin.Snapshot{
				Secrets: []envoyadmin.Secret{{Name: "server_cert", HasCertificate: true}},
				Listeners: []envoyadmin.FilterChainTLS{{SDSCertNames: []string{"server_cert", "ads"},
					SDSCertSources: []envoyadmin.SDSSource{{Name: "server_cert", Path: "/etc/envoy/sds.yaml", WatchedDir: "/certs"}}}},
			},
			want: []config.Binding{{Source: "a/web-tls", Secret: "server_cert", Origin: OriginPath}},
		},
		"ListenerSDSResourceInMount": {
			reason: "an SDS resource file read from the mount (node path here) binds that Secret; a source elsewhere binds nothing",
			snap: &envoyadmin.Snapshot{Listeners: []envoyadmin.FilterChainTLS{{SDSCertSources: []envoyadmin.SDSSource{
				{Name: "o", Path: node + "/other/sds.yaml"},
				{Name: "x", Path: "/etc/envoy/sds.yaml", WatchedDir: "/etc/envoy"},
				{Name: "y", WatchedDir: "/var/lib/kubelet/pods/other-uid/volumes/kubernetes.io~secret/tls"},
			}}}},
			want: []config.Binding{{Source: "a/other-tls", Secret: "o", Origin: OriginPath}},
		},
		"ListenerSDSSameAsSecret": {
			reason: "the listener and the dumped secret agreeing yield one binding",
			snap: &envoyadmin.Snapshot{
				Secrets:   []envoyadmin.Secret{{Name: "web", HasCertificate: true, WatchedDir: "/certs"}},
				Listeners: []envoyadmin.FilterChainTLS{{SDSCertSources: []envoyadmin.SDSSource{{Name: "web", WatchedDir: "/certs"}}}},
			},
			want: []config.Binding{{Source: "a/web-tls", Secret: "web", Origin: OriginPath}},
		},
		"NoSnapshot": {reason: "no admin, no loaded bindings"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := LoadedBindings(target, "", tc.snap)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nLoadedBindings(): -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestListenerEndpoints(t *testing.T) {
	ls := []envoyadmin.FilterChainTLS{
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
