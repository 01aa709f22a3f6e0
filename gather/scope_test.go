package gather

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/ref"
)

func TestScopeTargets(t *testing.T) {
	targets := []kube.EnvoyTarget{{Namespace: "a", Pod: "gw-0"}, {Namespace: "a", Pod: "gw-1"}, {Namespace: "b", Pod: "gw-0"}, {Namespace: "ab", Pod: "gw-0"}}
	cases := map[string]struct {
		reason string
		scope  Scope
		want   []string
	}{
		"Fleet":       {reason: "the fleet keeps every pod", scope: Fleet, want: []string{"a/gw-0", "a/gw-1", "b/gw-0", "ab/gw-0"}},
		"Namespace":   {reason: "a namespace keeps its pods, not a namespace it prefixes", scope: InNamespace("a"), want: []string{"a/gw-0", "a/gw-1"}},
		"OnePod":      {reason: "one pod keeps only it, not the same name elsewhere", scope: OnePod("b", "gw-0"), want: []string{"b/gw-0"}},
		"AbsentPod":   {reason: "a pod discovery does not hold keeps nothing", scope: OnePod("a", "gw-9")},
		"EnvoyByName": {reason: "an Envoy named without a namespace still narrows", scope: Scope{Envoy: "a/gw-1"}, want: []string{"a/gw-1"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, tg := range scopeTargets(targets, tc.scope) {
				got = append(got, tg.Key())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestScopeDesired: a narrowed round keeps its namespace's sources and what its pods reference
// in other namespaces, and nothing else; the fleet keeps everything.
func TestScopeDesired(t *testing.T) {
	inv := kube.Snapshot{
		Secrets: []*kube.SecretSummary{{Namespace: "a", Name: "web-tls"}, {Namespace: "b", Name: "web-tls"},
			{Namespace: "shared", Name: "gw-cert"}, {Namespace: "shared", Name: "other"}},
		ConfigMaps: []kube.ConfigMapSummary{{Namespace: "a", Name: "bundle"}, {Namespace: "c", Name: "peer-bundle"}, {Namespace: "c", Name: "unrelated"}},
	}
	refs := []ref.Source{{Kind: "Secret", Namespace: "shared", Name: "gw-cert"}, {Kind: "ConfigMap", Namespace: "c", Name: "peer-bundle"},
		{Kind: "ConfigMap", Namespace: "shared", Name: "gw-cert"}} // a ConfigMap ref does not keep the Secret of the same name
	names := func(s kube.Snapshot) []string {
		var out []string
		for _, x := range s.Secrets {
			out = append(out, ref.Source{Kind: ref.Secret, Namespace: x.Namespace, Name: x.Name}.String())
		}
		for _, x := range s.ConfigMaps {
			out = append(out, ref.Source{Kind: ref.ConfigMap, Namespace: x.Namespace, Name: x.Name}.String())
		}
		return out
	}
	cases := map[string]struct {
		reason string
		scope  Scope
		want   []string
	}{
		"Fleet": {reason: "the fleet keeps every source", scope: Fleet, want: names(inv)},
		"OnePod": {reason: "one pod keeps its namespace's sources and what it references",
			scope: OnePod("a", "gw-0"), want: []string{"a/web-tls", "shared/gw-cert", "configmap:a/bundle", "configmap:c/peer-bundle"}},
		"Namespace": {reason: "a namespace keeps its own sources and what its pods reference",
			scope: InNamespace("b"), want: []string{"b/web-tls", "shared/gw-cert", "configmap:c/peer-bundle"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, names(scopeDesired(inv, tc.scope, refs))); diff != "" {
				t.Errorf("%s: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestShardSources: a shard's fleet round keeps the sources it owns, every source in a namespace
// where it has a pod (inferred bindings look there), and what its pods or pairings reference
// elsewhere; the Certificates it keeps are those whose Secret it keeps. One shard keeps all.
func TestShardSources(t *testing.T) {
	owned := map[string]bool{"a/owned": true, "configmap-ns/owned-bundle": true}
	keep := func(namespace, name string) bool { return owned[namespace+"/"+name] }
	inv := kube.Snapshot{
		Secrets: []*kube.SecretSummary{{Namespace: "a", Name: "owned"}, {Namespace: "a", Name: "foreign"},
			{Namespace: "pods", Name: "mounted"}, {Namespace: "pods", Name: "inferred"},
			{Namespace: "shared", Name: "gw-cert"}, {Namespace: "shared", Name: "other"}},
		ConfigMaps: []kube.ConfigMapSummary{{Namespace: "configmap-ns", Name: "owned-bundle"}, {Namespace: "configmap-ns", Name: "other"},
			{Namespace: "pods", Name: "bundle"}},
	}
	targets := []kube.EnvoyTarget{{Namespace: "pods", Pod: "gw-0"}}
	refs := []ref.Source{{Kind: ref.Secret, Namespace: "shared", Name: "gw-cert"}}
	var got []string
	kept := keepDesired(inv, shardSources(keep, targets, refs))
	for _, x := range kept.Secrets {
		got = append(got, x.Namespace+"/"+x.Name)
	}
	for _, x := range kept.ConfigMaps {
		got = append(got, "configmap:"+x.Namespace+"/"+x.Name)
	}
	want := []string{"a/owned", "pods/mounted", "pods/inferred", "shared/gw-cert", "configmap:configmap-ns/owned-bundle", "configmap:pods/bundle"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kept sources (-want +got):\n%s", diff)
	}
	if shardSources(nil, targets, refs) != nil {
		t.Error("one shard (nil keep) must keep every source")
	}
	cm := kube.CertManager{Read: true, Present: true, Certificates: []kube.CMCertificate{
		{Namespace: "a", Name: "c1", SecretName: "owned"}, {Namespace: "a", Name: "c2", SecretName: "foreign"},
		{Namespace: "pods", Name: "c3", SecretName: "not-yet-issued"}, {Namespace: "b", Name: "c4", SecretName: "x"}}}
	var certs []string
	for _, c := range shardCertManager(cm, shardSources(keep, targets, refs)).Certificates {
		certs = append(certs, c.Namespace+"/"+c.Name)
	}
	// c3's Secret does not exist yet: it is in the pods' namespace, so this shard judges it.
	if diff := cmp.Diff([]string{"a/c1", "pods/c3"}, certs); diff != "" {
		t.Errorf("kept Certificates (-want +got):\n%s", diff)
	}
}

// TestLocalScope: a local round scoped to one Envoy reads only that Envoy (its admin and its
// endpoints), and every desired source.
func TestLocalScope(t *testing.T) {
	dir := t.TempDir()
	closed := closedPort(t)
	cfg := &config.Config{
		Desired: []config.Desired{{Name: "front", Dir: dir}},
		Envoys: []config.Envoy{
			{Name: "one", Endpoints: []config.Endpoint{{Address: closed}}},
			{Name: "two", Endpoints: []config.Endpoint{{Address: closed, SNI: []string{"x", "y"}}}},
		},
	}
	for name, tc := range map[string]struct {
		scope      Scope
		envoys     []string
		handshakes int
	}{
		"Fleet":    {scope: Fleet, envoys: []string{"one", "two"}, handshakes: 3},
		"OneEnvoy": {scope: OneEnvoy("two"), envoys: []string{"two"}, handshakes: 2},
		"Unknown":  {scope: OneEnvoy("three")},
	} {
		t.Run(name, func(t *testing.T) {
			in := Local(context.Background(), cfg, tc.scope, Options{Timeout: time.Second, Concurrency: 2})
			var got []string
			n := 0
			for _, ev := range in.Envoys {
				got = append(got, ev.Config.Name)
				n += len(ev.Served)
			}
			if diff := cmp.Diff(tc.envoys, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("envoys: -want +got:\n%s", diff)
			}
			if n != tc.handshakes {
				t.Errorf("%d handshakes, want %d", n, tc.handshakes)
			}
			if len(in.Desired) != 1 || len(in.Config.Envoys) != len(tc.envoys) {
				t.Errorf("desired %d (want 1), config envoys %d (want %d)", len(in.Desired), len(in.Config.Envoys), len(tc.envoys))
			}
			if len(cfg.Envoys) != 2 {
				t.Fatalf("Local changed the caller's config: %d Envoys left", len(cfg.Envoys))
			}
		})
	}
}

// TestPromoteNamespaces: a shard's round reads the stubs of its pods' namespaces and of the
// scope's (a namespace, or one pod's), each once.
func TestPromoteNamespaces(t *testing.T) {
	targets := []kube.EnvoyTarget{{Namespace: "pods", Pod: "gw-0"}, {Namespace: "edge", Pod: "gw-1"}, {Namespace: "pods", Pod: "gw-2"}}
	for _, tc := range []struct {
		sc   Scope
		want []string
	}{
		{Fleet, []string{"pods", "edge"}},
		{InNamespace("quiet"), []string{"pods", "edge", "quiet"}},
		{OnePod("solo", "envoy-0"), []string{"pods", "edge", "solo"}},
	} {
		if diff := cmp.Diff(tc.want, promoteNamespaces(targets, tc.sc)); diff != "" {
			t.Errorf("%+v (-want +got):\n%s", tc.sc, diff)
		}
	}
}

// TestOwnedMountedRefs: a shard reads by name the sources it owns that any shard's pods mount,
// once each and not again when already referenced; never those another shard owns.
func TestOwnedMountedRefs(t *testing.T) {
	pod := func(ns, name string, sources ...kube.VolumeSource) kube.EnvoyTarget {
		return kube.EnvoyTarget{Namespace: ns, Pod: name, EnvoyContainer: "envoy",
			Volumes: []kube.PodVolume{{Name: "certs", Sources: sources}},
			Mounts:  []kube.VolumeMount{{Container: "envoy", Volume: "certs", MountPath: "/certs"}}}
	}
	bundle := kube.VolumeSource{Kind: ref.ConfigMap, Name: "bundle"}
	targets := []kube.EnvoyTarget{
		pod("a", "p0", bundle, kube.VolumeSource{Kind: ref.Secret, Name: "theirs"}),
		pod("a", "p1", bundle, kube.VolumeSource{Kind: ref.Secret, Name: "mine"}),
		pod("b", "p2", kube.VolumeSource{Kind: ref.Secret, Name: "mine"}, kube.VolumeSource{Kind: ref.Secret, Name: "known"}),
	}
	keep := func(ns, name string) bool { return name != "theirs" }
	have := []ref.Source{{Kind: ref.Secret, Namespace: "b", Name: "known"}}
	got := ownedMountedRefs(targets, keep, have)
	want := []ref.Source{{Kind: ref.ConfigMap, Namespace: "a", Name: "bundle"}, {Kind: ref.Secret, Namespace: "a", Name: "mine"}, {Kind: ref.Secret, Namespace: "b", Name: "mine"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("owned mounted refs (-want +got):\n%s", diff)
	}
}
