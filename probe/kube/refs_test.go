package kube

import (
	"testing"

	"github.com/certdrift/certdrift/ref"
	"github.com/google/go-cmp/cmp"
)

// TestMountedRefs: what a pod mounts into Envoy and declares, each once, for reading the sources
// the inventory does not watch; not the service account token volume's ConfigMap.
func TestMountedRefs(t *testing.T) {
	tg := EnvoyTarget{Namespace: "a", Pod: "p", EnvoyContainer: "envoy", DeclaredSecrets: []string{"b/declared", "a/web-tls"},
		Volumes: []PodVolume{
			{Name: "tls", Sources: []VolumeSource{{Kind: "Secret", Name: "web-tls"}, {Kind: "Secret", Name: "web-ca"}, {Kind: "ConfigMap", Name: "bundle"}}},
			secretVol("again", "web-tls"), secretVol("app", "app-only"),
			{Name: "kube-api-access-x", Token: true, Sources: []VolumeSource{{Kind: "ConfigMap", Name: "kube-root-ca.crt"}}}},
		Mounts: []VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/tls"}, {Container: "envoy", Volume: "again", MountPath: "/again"},
			{Container: "app", Volume: "app", MountPath: "/app"},
			{Container: "envoy", Volume: "kube-api-access-x", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}}
	want := []ref.Source{{Kind: ref.Secret, Namespace: "a", Name: "web-tls"}, {Kind: ref.Secret, Namespace: "a", Name: "web-ca"},
		{Kind: ref.ConfigMap, Namespace: "a", Name: "bundle"}, {Kind: ref.Secret, Namespace: "b", Name: "declared"}}
	if diff := cmp.Diff(want, MountedRefs(tg)); diff != "" {
		t.Errorf("MountedRefs(): -want +got:\n%s", diff)
	}
}

func secretVol(name, secret string, items ...KeyPath) PodVolume {
	return PodVolume{Name: name, Sources: []VolumeSource{{Kind: "Secret", Name: secret, Items: items}}}
}
