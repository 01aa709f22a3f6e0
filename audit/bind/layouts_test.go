package bind

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/kube"
)

// TestLoadedBindingsContainerLayouts: container paths as a real cluster shows them, where mounts
// overlap and configs name the kubelet's "..data" directory. The container sees only the deepest
// mount at a path (runtimes mount shallowest first), so a file another mount covers is not the
// shallower volume's; and /certs/..data/tls.crt (or the timestamped directory it points to) is
// the volume's tls.crt.
func TestLoadedBindingsContainerLayouts(t *testing.T) {
	target := kube.EnvoyTarget{Namespace: "a", Pod: "p", UID: "0f1e-uid", EnvoyContainer: "envoy",
		Volumes: []kube.PodVolume{
			secretVol("old", "old-tls"),
			secretVol("web", "web-tls"),
			secretVol("files", "files", kube.KeyPath{Key: "tls.crt", Path: "tls/tls.crt"}, kube.KeyPath{Key: "ca.crt", Path: "ca.crt"}),
		},
		Mounts: []kube.VolumeMount{
			// web-tls's tls.crt over old-tls's at /certs/tls.crt (listed first on purpose: the
			// order of the spec does not matter, depth does).
			{Container: "envoy", Volume: "web", MountPath: "/certs/tls.crt", SubPath: "tls.crt"},
			{Container: "envoy", Volume: "old", MountPath: "/certs"},
			// files projects tls/tls.crt, but web-tls is mounted over /etc/envoy/tls.
			{Container: "envoy", Volume: "files", MountPath: "/etc/envoy"},
			{Container: "envoy", Volume: "web", MountPath: "/etc/envoy/tls"},
			// The same volume mounted for another container shadows nothing in Envoy's.
			{Container: "sidecar", Volume: "old", MountPath: "/etc/envoy/tls/tls.crt", SubPath: "tls.crt"},
		}}
	node := "/var/lib/kubelet/pods/0f1e-uid/volumes/kubernetes.io~secret"
	cases := map[string]struct {
		reason string
		snap   *envoystate.Snapshot
		want   []config.Binding
	}{
		"SubPathOverDirectoryMount": {
			reason: "/certs/tls.crt is web-tls's subPath file, not old-tls's",
			snap:   &envoystate.Snapshot{Contexts: []envoystate.TLSContext{{Chain: []envoystate.CertDetail{{Path: "/certs/tls.crt"}}}}},
			want:   []config.Binding{{Source: "a/web-tls", File: "/certs/tls.crt", Dir: "/certs", Origin: audit.OriginPath}},
		},
		"ShadowedDirectoryMount": {
			reason: "/etc/envoy/tls is web-tls's mount: files' tls/tls.crt under it is hidden",
			snap:   &envoystate.Snapshot{Contexts: []envoystate.TLSContext{{Chain: []envoystate.CertDetail{{Path: "/etc/envoy/tls/tls.crt"}}}}},
			want:   []config.Binding{{Source: "a/web-tls", File: "/etc/envoy/tls/tls.crt", CAFile: "/etc/envoy/tls/ca.crt", Dir: "/etc/envoy/tls", Origin: audit.OriginPath}},
		},
		"ShadowedWatchedDir": {
			reason: "an SDS secret watching /etc/envoy/tls watches web-tls, not files",
			snap:   &envoystate.Snapshot{Secrets: []envoystate.Secret{{Name: "web", HasCertificate: true, WatchedDir: "/etc/envoy/tls"}}},
			want:   []config.Binding{{Source: "a/web-tls", Secret: "web", CAFile: "/etc/envoy/tls/ca.crt", Dir: "/etc/envoy/tls", Origin: audit.OriginPath}},
		},
		"UncoveredFileOfParentMount": {
			reason: "files' own ca.crt at /etc/envoy/ca.crt is not under the deeper mount and still binds",
			snap:   &envoystate.Snapshot{Contexts: []envoystate.TLSContext{{CA: []envoystate.CertDetail{{Path: "/etc/envoy/ca.crt"}}}}},
			want:   []config.Binding{{Source: "a/files", CAFile: "/etc/envoy/ca.crt", Dir: "/etc/envoy", Origin: audit.OriginPath}},
		},
		"DataSymlinkFile": {
			reason: "a config naming ..data/tls.crt reads the volume's tls.crt",
			snap:   &envoystate.Snapshot{Contexts: []envoystate.TLSContext{{Chain: []envoystate.CertDetail{{Path: "/etc/envoy/tls/..data/tls.crt"}}}}},
			want:   []config.Binding{{Source: "a/web-tls", File: "/etc/envoy/tls/..data/tls.crt", CAFile: "/etc/envoy/tls/ca.crt", Dir: "/etc/envoy/tls/..data", Origin: audit.OriginPath}},
		},
		"TimestampDirFile": {
			reason: "the timestamped directory ..data points to is the volume's content too",
			snap: &envoystate.Snapshot{Contexts: []envoystate.TLSContext{{Chain: []envoystate.CertDetail{
				{Path: "/etc/envoy/tls/..2026_11_26_02_41_36.1234567890/tls.crt"}}}}},
			want: []config.Binding{{Source: "a/web-tls", File: "/etc/envoy/tls/..2026_11_26_02_41_36.1234567890/tls.crt", CAFile: "/etc/envoy/tls/ca.crt",
				Dir: "/etc/envoy/tls/..2026_11_26_02_41_36.1234567890", Origin: audit.OriginPath}},
		},
		"DataSymlinkWatchedDir": {
			reason: "an SDS secret watching ..data watches the volume",
			snap:   &envoystate.Snapshot{Secrets: []envoystate.Secret{{Name: "web", HasCertificate: true, WatchedDir: "/etc/envoy/tls/..data"}}},
			want:   []config.Binding{{Source: "a/web-tls", Secret: "web", CAFile: "/etc/envoy/tls/ca.crt", Dir: "/etc/envoy/tls/..data", Origin: audit.OriginPath}},
		},
		"DataSymlinkNodePath": {
			reason: "the node's path through ..data names the volume as well",
			snap:   &envoystate.Snapshot{Contexts: []envoystate.TLSContext{{Chain: []envoystate.CertDetail{{Path: node + "/web/..data/tls.crt"}}}}},
			want:   []config.Binding{{Source: "a/web-tls", File: node + "/web/..data/tls.crt", CAFile: node + "/web/ca.crt", Dir: node + "/web/..data", Origin: audit.OriginPath}},
		},
		"DotDotIsNotData": {
			reason: "a name that merely starts with two dots is not the kubelet's layout",
			snap:   &envoystate.Snapshot{Contexts: []envoystate.TLSContext{{Chain: []envoystate.CertDetail{{Path: "/etc/envoy/tls/..old/tls.crt"}}}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := LoadedBindings(target, nil, tc.snap)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nLoadedBindings(): -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestBindShadowedMounts: the spec's own bindings leave out a file another mount covers, so that
// the audit does not judge old-tls against what web-tls put at /certs/tls.crt.
func TestBindShadowedMounts(t *testing.T) {
	target := kube.EnvoyTarget{Namespace: "a", Pod: "p", EnvoyContainer: "envoy",
		Volumes: []kube.PodVolume{secretVol("old", "old-tls"), secretVol("web", "web-tls")},
		Mounts: []kube.VolumeMount{
			{Container: "envoy", Volume: "old", MountPath: "/certs"},
			{Container: "envoy", Volume: "web", MountPath: "/certs/tls.crt", SubPath: "tls.crt"},
		}}
	got := Bind(target, nil).Envoy.Bindings
	want := []config.Binding{
		{Source: "a/old-tls", CAFile: "/certs/ca.crt", Dir: "/certs", Origin: audit.OriginPath},
		{Source: "a/web-tls", File: "/certs/tls.crt", Dir: "/certs", Origin: audit.OriginPath},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Bind(): -want +got:\n%s", diff)
	}
}
