package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
	"github.com/certdrift/certdrift/test/testbed"
)

// envoyWorkloads are the Deployments deployEnvoys creates: three Envoys (one per preset, each
// serving its own Secret on 8443) and one pod that is not an Envoy. %[1]s is the namespace,
// %[2]s the Envoy version.
const envoyWorkloads = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: plain, namespace: "%[1]s"}
spec:
  replicas: 1
  selector: {matchLabels: {app: plain}}
  template:
    metadata:
      labels: {app: plain}
      annotations: {certdrift.dev/probe-ports: "8443/plain.example"}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: envoy
        image: envoyproxy/envoy:v%[2]s
        args: ["-c", "/etc/envoy/envoy.json"]
        volumeMounts:
        - {name: config, mountPath: /etc/envoy}
        - {name: tls, mountPath: /certs, readOnly: true}
      volumes:
      - {name: config, configMap: {name: plain-config}}
      - {name: tls, secret: {secretName: plain-tls}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: ingress, namespace: "%[1]s"}
spec:
  replicas: 1
  selector: {matchLabels: {app: ingress}}
  template:
    metadata:
      labels: {app: ingress, istio: ingressgateway}
      annotations: {certdrift.dev/secrets: "ingress-tls"}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: istio-proxy
        image: docker.io/istio/proxyv2:1.27.0
        args: ["-c", "/etc/istio/proxy/envoy.json"]
        volumeMounts:
        - {name: config, mountPath: /etc/istio/proxy}
        - {name: tls, mountPath: /etc/istio/ingressgateway-certs, readOnly: true}
      volumes:
      - {name: config, configMap: {name: ingress-config}}
      - {name: tls, secret: {secretName: ingress-tls, optional: true}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: envoy-default-eg-1a2b3c4d, namespace: "%[1]s"}
spec:
  replicas: 1
  selector: {matchLabels: {app.kubernetes.io/name: envoy, gateway.envoyproxy.io/owning-gateway-name: eg}}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: envoy
        app.kubernetes.io/component: proxy
        app.kubernetes.io/managed-by: envoy-gateway
        gateway.envoyproxy.io/owning-gateway-name: eg
        gateway.envoyproxy.io/owning-gateway-namespace: "%[1]s"
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: envoy
        image: docker.io/envoyproxy/envoy:distroless-v%[2]s
        args: ["--config-path", "/config/envoy.json"]
        volumeMounts:
        - {name: config, mountPath: /config}
        - {name: certs, mountPath: /certs, readOnly: true}
        - {name: certs, mountPath: /pinned/tls.crt, subPath: tls.crt}
      - name: shutdown-manager
        image: docker.io/envoyproxy/gateway:v1.5.0
      volumes:
      - {name: config, configMap: {name: eg-config}}
      - name: certs
        projected:
          sources:
          - secret:
              name: eg-tls
              items: [{key: tls.crt, path: tls.crt}, {key: tls.key, path: tls.key}]
          - configMap: {name: eg-ca, optional: true}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: "%[1]s"}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - {name: nginx, image: "nginx:1.27"}
`

// envoySet is what deployEnvoys created.
type envoySet struct {
	ns     string
	leaves map[string]*certs.Leaf // by Deployment name: the certificate its Secret holds
}

// adminAt returns a bootstrap serving certFile/keyFile on 0.0.0.0:8443 with the admin on
// address:port.
func adminAt(t *testing.T, address string, port int, certFile, keyFile string) string {
	t.Helper()
	var doc map[string]any
	b := envoytest.Bootstrap(envoytest.Listener{Address: "0.0.0.0", Port: 8443,
		Chains: []envoytest.Chain{{CertFile: certFile, KeyFile: keyFile}}})
	if err := json.Unmarshal([]byte(b), &doc); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	doc["admin"] = map[string]any{"address": map[string]any{"socket_address": map[string]any{"address": address, "port_value": port}}}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// deployEnvoys creates a namespace with envoyWorkloads and their ConfigMaps and Secrets, and
// waits for every pod to be Ready.
func deployEnvoys(t *testing.T, tb *testbed.Testbed, c kubernetes.Interface, suffix string) envoySet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := uniqueNS(t, suffix)
	createNamespaces(t, c, ns)
	pollDiscovery(t, "ServiceAccount "+ns+"/default", 30*time.Second, func() error {
		_, err := c.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	ca := certs.NewCA(t, certs.WithCommonName("Discovery CA"))
	set := envoySet{ns: ns, leaves: map[string]*certs.Leaf{}}
	for _, w := range []struct{ deployment, secret, config, file, admin, certDir string }{
		{"plain", "plain-tls", "plain-config", "envoy.json", "0.0.0.0:9901", "/certs"},
		{"ingress", "ingress-tls", "ingress-config", "envoy.json", "127.0.0.1:15000", "/etc/istio/ingressgateway-certs"},
		{"envoy-default-eg-1a2b3c4d", "eg-tls", "eg-config", "envoy.json", "127.0.0.1:19000", "/certs"},
	} {
		leaf := ca.Leaf(t, certs.WithDNSNames(w.deployment+".example"))
		set.leaves[w.deployment] = leaf
		createSecret(t, c, tlsSecret(ns, w.secret, leaf.CertPEM, leaf.KeyPEM, nil))
		host, port, _ := strings.Cut(w.admin, ":")
		var portNum int
		fmt.Sscan(port, &portNum)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w.config},
			Data: map[string]string{w.file: adminAt(t, host, portNum, w.certDir+"/tls.crt", w.certDir+"/tls.key")}}
		if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ConfigMap %s: %v", w.config, err)
		}
	}
	for i, doc := range strings.Split(fmt.Sprintf(envoyWorkloads, ns, envoytest.DefaultVersion), "\n---\n") {
		var d appsv1.Deployment
		if err := yaml.UnmarshalStrict([]byte(doc), &d); err != nil {
			t.Fatalf("workload %d: %v", i, err)
		}
		if _, err := c.AppsV1().Deployments(ns).Create(ctx, &d, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create Deployment %s: %v", d.Name, err)
		}
	}
	if _, err := tb.WaitPodsReady(ctx, ns, ""); err != nil {
		t.Fatal(err)
	}
	return set
}

func pollDiscovery(t *testing.T, what string, within time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func startDiscovery(t *testing.T, cfg *rest.Config, opts DiscoveryOptions) *Discovery {
	t.Helper()
	d, err := NewDiscovery(cfg, opts)
	if err != nil {
		t.Fatalf("NewDiscovery: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("discovery did not stop within 10s of cancel")
		}
	})
	return d
}

// targetFacts is what the discovery test compares per target: everything but what the cluster
// chooses (pod names, UIDs, IPs, times).
type targetFacts struct {
	Owner              Owner
	Preset             Preset
	EnvoyContainer     string
	Containers         []string // name=image
	AdminPort          int
	AdminLocalhostOnly bool
	StatsPort          int
	ProbePorts         []ProbePort
	DeclaredSecrets    []string
	Volumes            []PodVolume
	Mounts             []VolumeMount
	AnnotationErrors   []string
}

func factsOf(t EnvoyTarget) targetFacts {
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
			Owner: Owner{Kind: "Deployment", Name: "envoy-default-eg-1a2b3c4d"}, Preset: PresetEnvoyGateway, EnvoyContainer: "envoy",
			Containers: []string{"envoy=docker.io/envoyproxy/envoy:distroless-v" + v, "shutdown-manager=docker.io/envoyproxy/gateway:v1.5.0"},
			AdminPort:  19000, AdminLocalhostOnly: true, StatsPort: 19001,
			Volumes: []PodVolume{
				{Name: "config", Sources: []VolumeSource{{Kind: "ConfigMap", Name: "eg-config"}}},
				{Name: "certs", Sources: []VolumeSource{
					{Kind: "Secret", Name: "eg-tls", Items: []KeyPath{{"tls.crt", "tls.crt"}, {"tls.key", "tls.key"}}},
					{Kind: "ConfigMap", Name: "eg-ca", Optional: true},
				}},
			},
			Mounts: []VolumeMount{
				{Container: "envoy", Volume: "config", MountPath: "/config"},
				{Container: "envoy", Volume: "certs", MountPath: "/certs"},
				{Container: "envoy", Volume: "certs", MountPath: "/pinned/tls.crt", SubPath: "tls.crt"},
			},
		},
		{
			Owner: Owner{Kind: "Deployment", Name: "ingress"}, Preset: PresetIstio, EnvoyContainer: "istio-proxy",
			Containers: []string{"istio-proxy=docker.io/istio/proxyv2:1.27.0"}, AdminPort: 15000, AdminLocalhostOnly: true,
			DeclaredSecrets: []string{ns + "/ingress-tls"},
			Volumes: []PodVolume{
				{Name: "config", Sources: []VolumeSource{{Kind: "ConfigMap", Name: "ingress-config"}}},
				{Name: "tls", Sources: []VolumeSource{{Kind: "Secret", Name: "ingress-tls", Optional: true}}},
			},
			Mounts: []VolumeMount{
				{Container: "istio-proxy", Volume: "config", MountPath: "/etc/istio/proxy"},
				{Container: "istio-proxy", Volume: "tls", MountPath: "/etc/istio/ingressgateway-certs"},
			},
		},
		{
			Owner: Owner{Kind: "Deployment", Name: "plain"}, Preset: PresetEnvoy, EnvoyContainer: "envoy",
			Containers: []string{"envoy=envoyproxy/envoy:v" + v}, AdminPort: 9901,
			ProbePorts: []ProbePort{{Port: 8443, SNIs: []string{"plain.example"}}},
			Volumes: []PodVolume{
				{Name: "config", Sources: []VolumeSource{{Kind: "ConfigMap", Name: "plain-config"}}},
				{Name: "tls", Sources: []VolumeSource{{Kind: "Secret", Name: "plain-tls"}}},
			},
			Mounts: []VolumeMount{
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
	admin := fastAdmin(t, tb)
	set := deployEnvoys(t, tb, admin, "d")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	changes := make(chan string, 100)
	d := startDiscovery(t, tb.Config, DiscoveryOptions{Namespaces: []string{set.ns},
		OnChange: func(op ChangeOp, ns, pod string) {
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
	if diff := cmp.Diff(wantTargets(set.ns), got); diff != "" {
		t.Errorf("discovered targets (-want +got):\n%s", diff)
	}

	pods, err := admin.CoreV1().Pods(set.ns).List(ctx, metav1.ListOptions{})
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
		if tg.Namespace != set.ns || tg.UID != string(p.UID) || tg.PodIP == "" || tg.PodIP != p.Status.PodIP || tg.Node != p.Spec.NodeName ||
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
	var victim EnvoyTarget
	for _, tg := range snap.Targets {
		if tg.Preset == PresetIstio {
			victim = tg
		}
	}
	drain(changes)
	if err := admin.CoreV1().Pods(set.ns).Delete(ctx, victim.Pod, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s: %v", victim.Pod, err)
	}
	pollDiscovery(t, "deleted pod gone and its replacement found", 60*time.Second, func() error {
		var istio []string
		for _, tg := range d.Targets(ctx).Targets {
			if tg.UID == victim.UID && !tg.Terminating {
				return fmt.Errorf("%s still listed and not terminating", victim.Pod)
			}
			if tg.Preset == PresetIstio {
				istio = append(istio, tg.Pod)
			}
		}
		if len(istio) != 1 || istio[0] == victim.Pod {
			return fmt.Errorf("istio targets %v, want only a replacement for %s", istio, victim.Pod)
		}
		return nil
	})
	pollDiscovery(t, "OnChange reports the deletion", 10*time.Second, func() error {
		for {
			select {
			case c := <-changes:
				if c == fmt.Sprintf("%s %s/%s", Deleted, set.ns, victim.Pod) {
					return nil
				}
			default:
				return fmt.Errorf("no Deleted change for %s yet", victim.Pod)
			}
		}
	})

	// An annotation that opts a pod out removes it like a deletion.
	var plain EnvoyTarget
	for _, tg := range snap.Targets {
		if tg.Preset == PresetEnvoy {
			plain = tg
		}
	}
	drain(changes)
	patch := []byte(`{"metadata":{"annotations":{"` + AnnotationPreset + `":"none"}}}`)
	if _, err := admin.CoreV1().Pods(set.ns).Patch(ctx, plain.Pod, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate pod %s: %v", plain.Pod, err)
	}
	pollDiscovery(t, "opted-out pod gone with a Deleted change", 10*time.Second, func() error {
		for _, tg := range d.Targets(ctx).Targets {
			if tg.UID == plain.UID {
				return fmt.Errorf("%s still listed", plain.Pod)
			}
		}
		for {
			select {
			case c := <-changes:
				if c == fmt.Sprintf("%s %s/%s", Deleted, set.ns, plain.Pod) {
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
	admin := fastAdmin(t, tb)
	set := deployEnvoys(t, tb, admin, "s")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	rec := &recorder{}
	d := startDiscovery(t, recorded(tb.Config, rec), DiscoveryOptions{Selectors: PresetSelectors[PresetEnvoyGateway], Presets: []Preset{PresetEnvoyGateway, PresetEnvoy}})
	if err := d.WaitSynced(ctx); err != nil {
		t.Fatalf("WaitSynced: %v", err)
	}
	var got []string
	for _, tg := range d.Targets(ctx).Targets {
		if tg.Namespace == set.ns {
			got = append(got, string(tg.Preset)+" "+tg.Owner.Name)
		}
	}
	if diff := cmp.Diff([]string{"envoy-gateway envoy-default-eg-1a2b3c4d"}, got); diff != "" {
		t.Errorf("targets with Envoy Gateway selectors (-want +got):\n%s", diff)
	}
	var lists []string
	for _, r := range rec.requests() {
		if r.path == "/api/v1/pods" {
			lists = append(lists, r.query)
		}
	}
	for _, sel := range PresetSelectors[PresetEnvoyGateway] {
		found := false
		for _, q := range lists {
			found = found || strings.Contains(q, "labelSelector="+url.QueryEscape(sel)) && strings.Contains(q, "fieldSelector=status.phase%3DRunning")
		}
		if !found {
			t.Errorf("no pods request with labelSelector %q and the Running field selector among %q", sel, lists)
		}
	}

	d2 := startDiscovery(t, tb.Config, DiscoveryOptions{Namespaces: []string{set.ns}, Presets: []Preset{PresetIstio}})
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
