package discovery

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/internal/kubetest"
	"github.com/certdrift/certdrift/test/envoytest"
)

func startDiscovery(t *testing.T, cfg *rest.Config, opts Options) *Discovery {
	t.Helper()
	d, err := New(cfg, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	kubetest.RunUntilCleanup(t, "discovery", d.Run)
	return d
}

// targetFacts is what the discovery test compares per target: everything but what the cluster
// chooses (pod names, UIDs, IPs, times).
type targetFacts struct {
	Owner              kube.Owner
	Preset             kube.Preset
	EnvoyContainer     string
	Containers         []string // name=image
	AdminPort          int
	AdminLocalhostOnly bool
	StatsPort          int
	ProbePorts         []kube.ProbePort
	DeclaredSecrets    []string
	Volumes            []kube.PodVolume
	Mounts             []kube.VolumeMount
	AnnotationErrors   []string
}

func factsOf(t kube.EnvoyTarget) targetFacts {
	f := targetFacts{Owner: t.Owner, Preset: t.Preset, EnvoyContainer: t.EnvoyContainer, AdminPort: t.AdminPort,
		AdminLocalhostOnly: t.AdminLocalhostOnly, StatsPort: t.StatsPort, ProbePorts: t.ProbePorts,
		DeclaredSecrets: t.DeclaredSecrets, AnnotationErrors: t.AnnotationErrors}
	for _, m := range t.Mounts {
		if !strings.HasPrefix(m.Volume, "kube-api-access-") {
			f.Mounts = append(f.Mounts, m)
		}
	}
	for _, c := range t.Containers {
		f.Containers = append(f.Containers, c.Name+"="+c.Image)
	}
	for _, v := range t.Volumes {
		// The API server adds the ServiceAccount token volume (kube-root-ca.crt); not ours.
		if !strings.HasPrefix(v.Name, "kube-api-access-") {
			f.Volumes = append(f.Volumes, v)
		}
	}
	return f
}

func wantTargets(ns string) []targetFacts {
	v := envoytest.DefaultVersion
	return []targetFacts{
		{
			Owner: kube.Owner{Kind: "Deployment", Name: "envoy-default-eg-1a2b3c4d"}, Preset: kube.PresetEnvoyGateway, EnvoyContainer: "envoy",
			Containers: []string{"envoy=docker.io/envoyproxy/envoy:distroless-v" + v, "shutdown-manager=docker.io/envoyproxy/gateway:v1.5.0"},
			AdminPort:  19000, AdminLocalhostOnly: true, StatsPort: 19001,
			Volumes: []kube.PodVolume{
				{Name: "config", Sources: []kube.VolumeSource{{Kind: "ConfigMap", Name: "eg-config"}}},
				{Name: "certs", Sources: []kube.VolumeSource{
					{Kind: "Secret", Name: "eg-tls", Items: []kube.KeyPath{{Key: "tls.crt", Path: "tls.crt"}, {Key: "tls.key", Path: "tls.key"}}},
					{Kind: "ConfigMap", Name: "eg-ca", Optional: true},
				}},
			},
			Mounts: []kube.VolumeMount{
				{Container: "envoy", Volume: "config", MountPath: "/config"},
				{Container: "envoy", Volume: "certs", MountPath: "/certs"},
				{Container: "envoy", Volume: "certs", MountPath: "/pinned/tls.crt", SubPath: "tls.crt"},
			},
		},
		{
			Owner: kube.Owner{Kind: "Deployment", Name: "ingress"}, Preset: kube.PresetIstio, EnvoyContainer: "istio-proxy",
			Containers: []string{"istio-proxy=docker.io/istio/proxyv2:1.27.0"}, AdminPort: 15000, AdminLocalhostOnly: true,
			DeclaredSecrets: []string{ns + "/ingress-tls"},
			Volumes: []kube.PodVolume{
				{Name: "config", Sources: []kube.VolumeSource{{Kind: "ConfigMap", Name: "ingress-config"}}},
				{Name: "tls", Sources: []kube.VolumeSource{{Kind: "Secret", Name: "ingress-tls", Optional: true}}},
			},
			Mounts: []kube.VolumeMount{
				{Container: "istio-proxy", Volume: "config", MountPath: "/etc/istio/proxy"},
				{Container: "istio-proxy", Volume: "tls", MountPath: "/etc/istio/ingressgateway-certs"},
			},
		},
		{
			Owner: kube.Owner{Kind: "Deployment", Name: "plain"}, Preset: kube.PresetEnvoy, EnvoyContainer: "envoy",
			Containers: []string{"envoy=envoyproxy/envoy:v" + v}, AdminPort: 9901,
			ProbePorts: []kube.ProbePort{{Port: 8443, SNIs: []string{"plain.example"}}},
			Volumes: []kube.PodVolume{
				{Name: "config", Sources: []kube.VolumeSource{{Kind: "ConfigMap", Name: "plain-config"}}},
				{Name: "tls", Sources: []kube.VolumeSource{{Kind: "Secret", Name: "plain-tls"}}},
			},
			Mounts: []kube.VolumeMount{
				{Container: "envoy", Volume: "config", MountPath: "/etc/envoy"},
				{Container: "envoy", Volume: "tls", MountPath: "/certs"},
			},
		},
	}
}

// TestDiscoverEnvoys deploys one Envoy per preset and a pod that is not an Envoy, and checks
// that namespace-scoped discovery finds exactly the Envoys with their presets, owners, ports and
// volumes, that status facts match the pods, and that a deleted pod leaves discovery.
func TestDiscoverEnvoys(t *testing.T) {
	tb := controlPlane(t)
	admin := kubetest.FastAdmin(t, tb)
	set := kubetest.DeployEnvoys(t, tb, admin, "d")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	changes := make(chan string, 100)
	d := startDiscovery(t, tb.Config, Options{Namespaces: []string{set.NS},
		OnChange: func(op kube.ChangeOp, ns, pod string) {
			select {
			case changes <- fmt.Sprintf("%s %s/%s", op, ns, pod):
			default:
			}
		}})
	if err := d.WaitSynced(ctx); err != nil {
		t.Fatalf("WaitSynced: %v", err)
	}
	snap := d.Targets(ctx)
	if !snap.Synced || len(snap.Errors) > 0 {
		t.Fatalf("snapshot synced %v errors %v", snap.Synced, snap.Errors)
	}
	var got []targetFacts
	for _, tg := range snap.Targets {
		got = append(got, factsOf(tg))
	}
	if diff := cmp.Diff(wantTargets(set.NS), got); diff != "" {
		t.Errorf("discovered targets (-want +got):\n%s", diff)
	}

	pods, err := admin.CoreV1().Pods(set.NS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		byName[p.Name] = p
	}
	for _, tg := range snap.Targets {
		p, ok := byName[tg.Pod]
		if !ok {
			t.Errorf("target %s is not a pod of the namespace", tg.Key())
			continue
		}
		if tg.Namespace != set.NS || tg.UID != string(p.UID) || tg.PodIP == "" || tg.PodIP != p.Status.PodIP || tg.Node != p.Spec.NodeName ||
			tg.Node == "" || !tg.StartTime.Equal(p.Status.StartTime.Time) || tg.Terminating {
			t.Errorf("target %s: ns %s uid %s ip %s node %s start %v terminating %v; pod uid %s ip %s node %s start %v",
				tg.Key(), tg.Namespace, tg.UID, tg.PodIP, tg.Node, tg.StartTime, tg.Terminating, p.UID, p.Status.PodIP, p.Spec.NodeName, p.Status.StartTime)
		}
		for _, c := range tg.Containers {
			if c.StartedAt.IsZero() || c.RestartCount != 0 || !c.Ready {
				t.Errorf("target %s container %s: startedAt %v restarts %d ready %v", tg.Key(), c.Name, c.StartedAt, c.RestartCount, c.Ready)
			}
		}
	}

	// A deleted pod leaves discovery; its ReplicaSet's replacement joins it.
	var victim kube.EnvoyTarget
	for _, tg := range snap.Targets {
		if tg.Preset == kube.PresetIstio {
			victim = tg
		}
	}
	drain(changes)
	if err := admin.CoreV1().Pods(set.NS).Delete(ctx, victim.Pod, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s: %v", victim.Pod, err)
	}
	kubetest.Poll(t, "deleted pod gone and its replacement found", 60*time.Second, func() error {
		var istio []string
		for _, tg := range d.Targets(ctx).Targets {
			if tg.UID == victim.UID && !tg.Terminating {
				return fmt.Errorf("%s still listed and not terminating", victim.Pod)
			}
			if tg.Preset == kube.PresetIstio {
				istio = append(istio, tg.Pod)
			}
		}
		if len(istio) != 1 || istio[0] == victim.Pod {
			return fmt.Errorf("istio targets %v, want only a replacement for %s", istio, victim.Pod)
		}
		return nil
	})
	kubetest.Poll(t, "OnChange reports the deletion", 10*time.Second, func() error {
		for {
			select {
			case c := <-changes:
				if c == fmt.Sprintf("%s %s/%s", kube.Deleted, set.NS, victim.Pod) {
					return nil
				}
			default:
				return fmt.Errorf("no Deleted change for %s yet", victim.Pod)
			}
		}
	})

	// An annotation that opts a pod out removes it like a deletion.
	var plain kube.EnvoyTarget
	for _, tg := range snap.Targets {
		if tg.Preset == kube.PresetEnvoy {
			plain = tg
		}
	}
	drain(changes)
	patch := []byte(`{"metadata":{"annotations":{"` + kube.AnnotationPreset + `":"none"}}}`)
	if _, err := admin.CoreV1().Pods(set.NS).Patch(ctx, plain.Pod, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate pod %s: %v", plain.Pod, err)
	}
	kubetest.Poll(t, "opted-out pod gone with a Deleted change", 10*time.Second, func() error {
		for _, tg := range d.Targets(ctx).Targets {
			if tg.UID == plain.UID {
				return fmt.Errorf("%s still listed", plain.Pod)
			}
		}
		for {
			select {
			case c := <-changes:
				if c == fmt.Sprintf("%s %s/%s", kube.Deleted, set.NS, plain.Pod) {
					return nil
				}
			default:
				return fmt.Errorf("no Deleted change for %s yet", plain.Pod)
			}
		}
	})
}

func drain(ch chan string) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// TestDiscoverySelectorsAndPresets checks that Selectors are applied by the API server (a
// cluster-wide watch with the Envoy Gateway selectors sees only those pods) and that disabled
// presets find nothing.
func TestDiscoverySelectorsAndPresets(t *testing.T) {
	tb := controlPlane(t)
	admin := kubetest.FastAdmin(t, tb)
	set := kubetest.DeployEnvoys(t, tb, admin, "s")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	rec := &kubetest.Recorder{}
	d := startDiscovery(t, kubetest.Recorded(tb.Config, rec), Options{Selectors: PresetSelectors[kube.PresetEnvoyGateway], Presets: []kube.Preset{kube.PresetEnvoyGateway, kube.PresetEnvoy}})
	if err := d.WaitSynced(ctx); err != nil {
		t.Fatalf("WaitSynced: %v", err)
	}
	var got []string
	for _, tg := range d.Targets(ctx).Targets {
		if tg.Namespace == set.NS {
			got = append(got, string(tg.Preset)+" "+tg.Owner.Name)
		}
	}
	if diff := cmp.Diff([]string{"envoy-gateway envoy-default-eg-1a2b3c4d"}, got); diff != "" {
		t.Errorf("targets with Envoy Gateway selectors (-want +got):\n%s", diff)
	}
	var lists []string
	for _, r := range rec.Requests() {
		if r.Path == "/api/v1/pods" {
			lists = append(lists, r.Query)
		}
	}
	for _, sel := range PresetSelectors[kube.PresetEnvoyGateway] {
		found := false
		for _, q := range lists {
			found = found || strings.Contains(q, "labelSelector="+url.QueryEscape(sel)) && strings.Contains(q, "fieldSelector=status.phase%3DRunning")
		}
		if !found {
			t.Errorf("no pods request with labelSelector %q and the Running field selector among %q", sel, lists)
		}
	}

	d2 := startDiscovery(t, tb.Config, Options{Namespaces: []string{set.NS}, Presets: []kube.Preset{kube.PresetIstio}})
	if err := d2.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, tg := range d2.Targets(ctx).Targets {
		got = append(got, string(tg.Preset)+" "+tg.Owner.Name)
	}
	if diff := cmp.Diff([]string{"istio ingress"}, got); diff != "" {
		t.Errorf("targets with only the istio preset (-want +got):\n%s", diff)
	}
}
