// Package kubetest holds what the tests of probe/kube's packages share: clients and objects on the
// test cluster (test/testbed), a recorder of API requests, and a namespace of real Envoys, one per
// preset, for discovery and admin access.
package kubetest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
	"github.com/certdrift/certdrift/test/testbed"
)

// FastAdmin is an admin client allowed to create thousands of objects quickly.
func FastAdmin(t testing.TB, tb *testbed.Testbed) kubernetes.Interface {
	t.Helper()
	c := rest.CopyConfig(tb.Config)
	c.QPS, c.Burst = 2000, 2000
	c.ContentType = "application/vnd.kubernetes.protobuf"
	// The API server warns about the deliberately broken TLS Secrets the tests create.
	c.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}
	return cs
}

// CreateNamespaces creates the namespaces or fails the test.
func CreateNamespaces(t testing.TB, c kubernetes.Interface, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create namespace %s: %v", n, err)
		}
	}
}

// TLSSecret is a kubernetes.io/tls Secret holding cert and key, and ca when it is not nil.
func TLSSecret(ns, name string, cert, key, ca []byte) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": cert, "tls.key": key}}
	if ca != nil {
		s.Data["ca.crt"] = ca
	}
	return s
}

// CreateSecret creates s (field manager certdrift-test) or fails the test.
func CreateSecret(t testing.TB, c kubernetes.Interface, s *corev1.Secret) *corev1.Secret {
	t.Helper()
	out, err := c.CoreV1().Secrets(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{FieldManager: "certdrift-test"})
	if err != nil {
		t.Fatalf("create secret %s/%s: %v", s.Namespace, s.Name, err)
	}
	return out
}

// Request is one API Request as the client sent it, with the response's content type.
type Request struct {
	Method, Path, Query, ContentType string
}

// Recorder is a transport wrapper that records every Request through a client configuration.
type Recorder struct {
	mu   sync.Mutex
	reqs []Request
	next http.RoundTripper
}

// RoundTrip records req once it has an answer.
func (r *Recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.reqs = append(r.reqs, Request{req.Method, req.URL.Path, req.URL.RawQuery, resp.Header.Get("Content-Type")})
		r.mu.Unlock()
	}
	return resp, err
}

// Requests returns the requests recorded so far.
func (r *Recorder) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.reqs...)
}

// Recorded returns a copy of cfg whose requests rec records.
func Recorded(cfg *rest.Config, rec *Recorder) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec })
	return c
}

var nsCounter atomic.Int64

// UniqueNS returns a namespace name unique to this process (tests may run with -count).
func UniqueNS(t testing.TB, suffix string) string {
	n := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(n) > 36 {
		n = n[:36]
	}
	return fmt.Sprintf("%s-%d-%s", strings.Trim(n, "-"), nsCounter.Add(1), suffix)
}

// envoyWorkloads are the Deployments DeployEnvoys creates: three Envoys (one per preset, each
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

// EnvoySet is what DeployEnvoys created.
type EnvoySet struct {
	NS     string
	Leaves map[string]*certs.Leaf // by Deployment name: the certificate its Secret holds
}

// AdminAt returns a bootstrap serving certFile/keyFile on 0.0.0.0:8443 with the admin on
// address:port.
func AdminAt(t *testing.T, address string, port int, certFile, keyFile string) string {
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

// DeployEnvoys creates a namespace with envoyWorkloads and their ConfigMaps and Secrets, and
// waits for every pod to be Ready.
func DeployEnvoys(t *testing.T, tb *testbed.Testbed, c kubernetes.Interface, suffix string) EnvoySet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := UniqueNS(t, suffix)
	CreateNamespaces(t, c, ns)
	Poll(t, "ServiceAccount "+ns+"/default", 30*time.Second, func() error {
		_, err := c.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	ca := certs.NewCA(t, certs.WithCommonName("Discovery CA"))
	set := EnvoySet{NS: ns, Leaves: map[string]*certs.Leaf{}}
	for _, w := range []struct{ deployment, secret, config, file, admin, certDir string }{
		{"plain", "plain-tls", "plain-config", "envoy.json", "0.0.0.0:9901", "/certs"},
		{"ingress", "ingress-tls", "ingress-config", "envoy.json", "127.0.0.1:15000", "/etc/istio/ingressgateway-certs"},
		{"envoy-default-eg-1a2b3c4d", "eg-tls", "eg-config", "envoy.json", "127.0.0.1:19000", "/certs"},
	} {
		leaf := ca.Leaf(t, certs.WithDNSNames(w.deployment+".example"))
		set.Leaves[w.deployment] = leaf
		CreateSecret(t, c, TLSSecret(ns, w.secret, leaf.CertPEM, leaf.KeyPEM, nil))
		host, port, _ := strings.Cut(w.admin, ":")
		var portNum int
		fmt.Sscan(port, &portNum)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w.config},
			Data: map[string]string{w.file: AdminAt(t, host, portNum, w.certDir+"/tls.crt", w.certDir+"/tls.key")}}
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

// Poll calls check every 50ms until it returns nil, failing the test with its last error after
// within.
func Poll(t *testing.T, what string, within time.Duration, check func() error) {
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

// RunUntilCleanup runs an informer-backed component (an inventory or a discovery) until the test
// ends: its Run must stop within 10 s of the cancel, and an error from it fails the test.
func RunUntilCleanup(t testing.TB, what string, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := run(ctx); err != nil {
			t.Errorf("%s Run: %v", what, err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s did not stop within 10s of cancel", what)
		}
	})
}
