package gather

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/ref"
)

// TestUnwatchedRefs: what pods mount, declare or name over SDS, and what pairings name, is read
// by name only when the inventory does not hold it, each once.
func TestUnwatchedRefs(t *testing.T) {
	inv := kube.Snapshot{
		Secrets:    []*kube.SecretSummary{{Namespace: "a", Name: "web-tls"}},
		ConfigMaps: []kube.ConfigMapSummary{{Namespace: "a", Name: "watched-bundle"}},
	}
	vol := func(name string, srcs ...kube.VolumeSource) kube.PodVolume {
		return kube.PodVolume{Name: name, Sources: srcs}
	}
	targets := []kube.EnvoyTarget{
		{Namespace: "a", Pod: "p1", EnvoyContainer: "envoy",
			Volumes: []kube.PodVolume{vol("tls", kube.VolumeSource{Kind: "Secret", Name: "web-tls"}, kube.VolumeSource{Kind: "Secret", Name: "web-ca"}),
				vol("b", kube.VolumeSource{Kind: "ConfigMap", Name: "watched-bundle"}, kube.VolumeSource{Kind: "ConfigMap", Name: "bundle"})},
			Mounts: []kube.VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/tls"}, {Container: "envoy", Volume: "b", MountPath: "/b"}}},
		{Namespace: "a", Pod: "p2", EnvoyContainer: "envoy",
			Volumes: []kube.PodVolume{vol("tls", kube.VolumeSource{Kind: "Secret", Name: "web-ca"})},
			Mounts:  []kube.VolumeMount{{Container: "envoy", Volume: "tls", MountPath: "/tls"}}},
		{Namespace: "istio-system", Pod: "gw"},
	}
	admins := []*envoystate.Snapshot{nil, nil, {Secrets: []envoystate.Secret{{Name: "kubernetes://gw-cacert", HasValidation: true}}}}
	got := unwatchedRefs(inv, referencedRefs(targets, admins, []string{"a/web-tls", "configmap:b/peer-bundle", "not a source"}))
	want := []ref.Source{
		{Kind: "Secret", Namespace: "a", Name: "web-ca"}, {Kind: "ConfigMap", Namespace: "a", Name: "bundle"},
		{Kind: "Secret", Namespace: "istio-system", Name: "gw"}, {Kind: "Secret", Namespace: "istio-system", Name: "gw-cacert"},
		{Kind: "ConfigMap", Namespace: "b", Name: "peer-bundle"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unwatchedRefs(): -want +got:\n%s", diff)
	}
}
