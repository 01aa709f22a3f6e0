package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/test/cdbin"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/testbed"
)

// The trust scenarios of issue 13, each in its own namespace of one testbed:
//
//   - projected-trust: an Envoy whose volume projects a kubernetes.io/tls Secret (web-tls: the
//     leaf and its key, without ca.crt) and an Opaque Secret holding only ca.crt (web-ca), the
//     bundle of the listener's static validation context. The pod's trust comes from web-ca.
//   - local-admin: an Envoy whose admin listens on 127.0.0.1 only, probed with
//     --admin-access direct: the admin is unreachable, the TLS port is not.
const (
	trustNS      = "projected-trust"
	localAdminNS = "local-admin"
	caSecret     = "web-ca"
)

// trustReport is the part of the JSON report these tests read.
type trustReport struct {
	Bindings []struct {
		Envoy  string `json:"envoy"`
		Source string `json:"source"`
		Secret string `json:"secret"`
		File   string `json:"file"`
		Origin string `json:"origin"`
		State  string `json:"state"`
		Trust  bool   `json:"trust"`
	} `json:"bindings"`
	Findings []struct {
		Code    string `json:"code"`
		Subject struct {
			Envoy    string `json:"envoy"`
			Source   string `json:"source"`
			Endpoint string `json:"endpoint"`
		} `json:"subject"`
		Message string `json:"message"`
	} `json:"findings"`
	Summary struct {
		Handshakes int `json:"handshakes"`
	} `json:"summary"`
}

// auditNS runs certdrift in Kubernetes mode over namespaces and returns its exit code, report
// and output; no output may carry one of keys.
func auditNS(t *testing.T, tb *testbed.Testbed, keys [][]byte, namespaces string, extra ...string) (int, trustReport, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"audit", "--kubeconfig", tb.KubeconfigPath, "--namespace", namespaces,
		"--grace", grace.String(), "-o", "json", "--log.level", "debug"}, extra...)
	res, err := cdbin.Run(ctx, certdriftBin, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, args...)
	if err != nil {
		t.Fatal(err)
	}
	out := res.Output()
	for _, k := range keys {
		if body := pemBody(k); strings.Contains(out, "PRIVATE KEY") || (body != "" && strings.Contains(out, body)) {
			t.Fatalf("certdrift printed private key material")
		}
	}
	var r trustReport
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("certdrift exit %d: report is not JSON: %v\n%s", res.Code, err, out)
	}
	return res.Code, r, out
}

// TestKubeTrustBindings: the CA-only Secret a pod's projected volume holds is bound to the pod,
// before and after it rotates to a CA that no longer signs the served leaf (the verdict on that
// rotation, STALE_TRUST / CA_BUNDLE_GAP, is the audit's; this test proves the binding it needs).
// And TestKubeTrustBindings/LocalAdmin: an admin reachable only on the pod's localhost does not
// stop the handshakes.
func TestKubeTrustBindings(t *testing.T) {
	tb := testbed.StartT(t, testbed.Options{VolumeSyncDelay: syncDelay})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	t.Run("ProjectedCASecret", func(t *testing.T) {
		ca := certs.NewCA(t, certs.WithCommonName("e2e-trust-ca"))
		other := certs.NewCA(t, certs.WithCommonName("e2e-trust-other-ca"))
		leaf := ca.Leaf(t, certs.WithCommonName(webHost), certs.WithDNSNames(webHost))
		keys := [][]byte{leaf.KeyPEM}
		createNS(ctx, t, tb, trustNS)
		createSecrets(ctx, t, tb,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: trustNS, Name: "web-tls"}, Type: corev1.SecretTypeTLS,
				Data: map[string][]byte{corev1.TLSCertKey: leaf.ChainPEM(), corev1.TLSPrivateKeyKey: leaf.KeyPEM}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: trustNS, Name: caSecret}, Type: corev1.SecretTypeOpaque,
				Data: map[string][]byte{"ca.crt": ca.CertPEM}})
		tls := corev1.Volume{Name: "tls", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "web-tls"}}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: caSecret}}},
		}}}}
		pods := deployEnvoy(ctx, t, tb, trustNS, trustFiles, tls, "/certs")

		code, r, out := auditNS(t, tb, keys, trustNS)
		t.Logf("before the CA rotation: exit %d", code)
		logReport(t, r)
		for _, p := range pods {
			envoy := trustNS + "/" + p.Name
			checkBound(t, r, envoy, trustNS+"/"+caSecret, out)
			checkTrustOnly(t, r, envoy, trustNS+"/"+caSecret)
			checkTrustState(t, r, envoy, trustNS+"/"+caSecret, "converged", out)
			checkBound(t, r, envoy, trustNS+"/web-tls", out)
			// The service account volume's ca.crt is the API server's CA, not Envoy's trust.
			checkNotBound(t, r, envoy, "configmap:"+trustNS+"/kube-root-ca.crt")
		}
		if r.Summary.Handshakes == 0 {
			t.Errorf("no handshake with the projected-trust pods\n%s", out)
		}

		// Rotate the CA Secret to a CA that does not sign the served leaf. Envoy's static
		// validation context keeps the old CA; the desired bundle is the new one.
		s, err := tb.Client.CoreV1().Secrets(trustNS).Get(ctx, caSecret, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get Secret %s/%s: %v", trustNS, caSecret, err)
		}
		s.Data["ca.crt"] = other.CertPEM
		if _, err := tb.Client.CoreV1().Secrets(trustNS).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("rotate Secret %s/%s: %v", trustNS, caSecret, err)
		}
		rotated := time.Now()
		waitFile(ctx, t, tb, pods, "tls", "ca.crt", other.CertPEM)
		time.Sleep(time.Until(rotated.Add(grace + 2*time.Second)))

		code, r, out = auditNS(t, tb, keys, trustNS)
		t.Logf("after the CA rotation: exit %d", code)
		logReport(t, r)
		for _, p := range pods {
			envoy := trustNS + "/" + p.Name
			checkBound(t, r, envoy, trustNS+"/"+caSecret, out)
			checkTrustOnly(t, r, envoy, trustNS+"/"+caSecret)
			// The static validation context still trusts e2e-trust-ca only; the desired bundle is
			// the new CA: STALE_TRUST, critical (nothing in common), on this pod and source.
			checkTrustState(t, r, envoy, trustNS+"/"+caSecret, "stale", out)
			found := false
			for _, f := range r.Findings {
				if f.Code == "STALE_TRUST" && f.Subject.Envoy == envoy && f.Subject.Source == trustNS+"/"+caSecret {
					found = true
				}
			}
			if !found {
				t.Errorf("no STALE_TRUST for %s on %s after its CA Secret rotated\n%s", trustNS+"/"+caSecret, envoy, out)
			}
		}
		if code != 1 {
			t.Errorf("after the CA rotation: exit %d, want 1", code)
		}
	})

	t.Run("LocalAdmin", func(t *testing.T) {
		ca := certs.NewCA(t, certs.WithCommonName("e2e-local-admin-ca"))
		leaf := ca.Leaf(t, certs.WithCommonName(webHost), certs.WithDNSNames(webHost))
		keys := [][]byte{leaf.KeyPEM}
		createNS(ctx, t, tb, localAdminNS)
		createSecrets(ctx, t, tb, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: localAdminNS, Name: "web-tls"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: leaf.ChainPEM(), corev1.TLSPrivateKeyKey: leaf.KeyPEM, "ca.crt": ca.CertPEM}})
		tls := corev1.Volume{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "web-tls"}}}
		pods := deployEnvoy(ctx, t, tb, localAdminNS, localAdminFiles, tls, "/certs")

		code, r, out := auditNS(t, tb, keys, localAdminNS, "--admin-access", "direct")
		t.Logf("admin on localhost, direct access: exit %d", code)
		logReport(t, r)
		// The admin really was out of reach: otherwise this proves nothing.
		for _, p := range pods {
			envoy := localAdminNS + "/" + p.Name
			adminUnreachable := false
			for _, f := range r.Findings {
				if f.Code == "UNREACHABLE" && f.Subject.Envoy == envoy && strings.HasSuffix(f.Subject.Endpoint, ":9901") {
					adminUnreachable = true
				}
				if f.Code == "UNREACHABLE" && f.Subject.Envoy == envoy && strings.HasSuffix(f.Subject.Endpoint, ":8443") {
					t.Errorf("handshake with %s failed: %s", envoy, f.Message)
				}
			}
			if !adminUnreachable {
				t.Errorf("pod %s: no UNREACHABLE finding for its localhost-only admin: the test did not cut the admin off\n%s", envoy, out)
			}
			for _, b := range r.Bindings {
				if b.Envoy == envoy && b.Source == localAdminNS+"/web-tls" && b.State != "converged" {
					t.Errorf("binding %s -> %s is %s, want converged: the handshake alone shows the desired leaf", envoy, b.Source, b.State)
				}
			}
			checkBound(t, r, envoy, localAdminNS+"/web-tls", out)
		}
		if r.Summary.Handshakes < len(pods) {
			t.Errorf("%d handshakes with %d pods whose admin is unreachable, want at least one each\n%s", r.Summary.Handshakes, len(pods), out)
		}
	})
}

func logReport(t *testing.T, r trustReport) {
	t.Helper()
	for _, f := range r.Findings {
		t.Logf("OBSERVED: %s %s %s %s: %s", f.Code, f.Subject.Envoy, f.Subject.Source, f.Subject.Endpoint, f.Message)
	}
	for _, b := range r.Bindings {
		t.Logf("OBSERVED: binding %s -> %s origin %s secret %q file %q state %s", b.Envoy, b.Source, b.Origin, b.Secret, b.File, b.State)
	}
	t.Logf("OBSERVED: %d handshakes", r.Summary.Handshakes)
}

// checkBound fails unless the report binds envoy to source.
func checkBound(t *testing.T, r trustReport, envoy, source, out string) {
	t.Helper()
	for _, b := range r.Bindings {
		if b.Envoy == envoy && b.Source == source {
			return
		}
	}
	t.Errorf("no binding of %s to %s in the report\n%s", envoy, source, out)
}

// checkTrustOnly fails unless every binding of envoy to source is a trust binding: no
// certificate file, no certificate SDS secret. A CA-only Secret the desired view did not read as
// such would be bound to the tls.crt its projected volume shows, which is the other Secret's.
func checkTrustOnly(t *testing.T, r trustReport, envoy, source string) {
	t.Helper()
	for _, b := range r.Bindings {
		if b.Envoy == envoy && b.Source == source && !b.Trust {
			t.Errorf("binding %s -> %s (file %q, secret %q) is a certificate binding: a CA-only source holds no certificate", envoy, source, b.File, b.Secret)
		}
	}
}

// checkTrustState fails unless envoy's trust binding to source has state want.
func checkTrustState(t *testing.T, r trustReport, envoy, source, want, out string) {
	t.Helper()
	for _, b := range r.Bindings {
		if b.Envoy == envoy && b.Source == source && b.Trust {
			if b.State != want {
				t.Errorf("trust binding %s -> %s is %s, want %s\n%s", envoy, source, b.State, want, out)
			}
			return
		}
	}
	t.Errorf("no trust binding %s -> %s\n%s", envoy, source, out)
}

// checkNotBound fails if the report binds envoy to source.
func checkNotBound(t *testing.T, r trustReport, envoy, source string) {
	t.Helper()
	for _, b := range r.Bindings {
		if b.Envoy == envoy && b.Source == source {
			t.Errorf("%s is bound to %s (origin %s), which it does not use", envoy, source, b.Origin)
		}
	}
}

func createNS(ctx context.Context, t *testing.T, tb *testbed.Testbed, ns string) {
	t.Helper()
	if _, err := tb.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
}

func createSecrets(ctx context.Context, t *testing.T, tb *testbed.Testbed, ss ...*corev1.Secret) {
	t.Helper()
	for _, s := range ss {
		if _, err := tb.Client.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create Secret %s/%s: %v", s.Namespace, s.Name, err)
		}
	}
}

// deployEnvoy runs two Envoy replicas in ns with files (a ConfigMap at /etc/envoy) and vol
// mounted at mountPath, ports https 8443 and admin 9901, no certdrift annotation, and returns the
// Ready pods.
func deployEnvoy(ctx context.Context, t *testing.T, tb *testbed.Testbed, ns string, files map[string]string, vol corev1.Volume, mountPath string) []corev1.Pod {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "envoy-config"}, Data: files}
	if _, err := tb.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ConfigMap %s/envoy-config: %v", ns, err)
	}
	labels := map[string]string{"app": "envoy"}
	replicas, grace := int32(2), int64(5)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "envoy", Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.40.0",
					Args:  []string{"-c", "/etc/envoy/envoy.yaml", "--log-level", "info"},
					Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}, {Name: "admin", ContainerPort: 9901}},
					VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/envoy", ReadOnly: true},
						{Name: vol.Name, MountPath: mountPath, ReadOnly: true}}}},
				Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "envoy-config"}}}}, vol},
			}}},
	}
	if _, err := tb.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Deployment %s/envoy: %v", ns, err)
	}
	pods, err := tb.WaitPodsReady(ctx, ns, "app=envoy")
	if err != nil {
		t.Fatalf("%s: pods not ready: %v", ns, err)
	}
	if len(pods) != 2 {
		t.Fatalf("%s: %d pods ready, want 2", ns, len(pods))
	}
	return pods
}

// waitFile waits until file of volume vol holds want in every pod.
func waitFile(ctx context.Context, t *testing.T, tb *testbed.Testbed, pods []corev1.Pod, vol, file string, want []byte) {
	t.Helper()
	for _, p := range pods {
		dir, err := tb.PodDir(p.Namespace, p.Name)
		if err != nil {
			t.Fatal(err)
		}
		for {
			got, err := os.ReadFile(filepath.Join(dir, "volumes", vol, file))
			if err == nil && string(got) == string(want) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("pod %s/%s volume %s never held the new %s (last error %v)", p.Namespace, p.Name, vol, file, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// bootstrap is an Envoy bootstrap: admin on adminHost:9901 and a TLS listener on 8443 answering
// 200, with the given common_tls_context (indented by 8 spaces).
func bootstrap(name, adminHost, tlsContext string) string {
	return fmt.Sprintf(`node: {id: %[1]s, cluster: %[1]s}
admin:
  address:
    socket_address: {address: %[2]s, port_value: 9901}
static_resources:
  listeners:
  - name: https
    address:
      socket_address: {address: 0.0.0.0, port_value: 8443}
    filter_chains:
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
%[3]s
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: https
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: /}
                direct_response: {status: 200, body: {inline_string: "%[1]s"}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
`, name, adminHost, tlsContext)
}

// trustFiles: the certificate by file-based SDS watching the projected volume, the client CA
// bundle as a static validation context read from the same volume (client certificates are
// verified when presented, not required, so certdrift's handshake needs none).
var trustFiles = map[string]string{
	"envoy.yaml": bootstrap("projected-trust", "0.0.0.0", `            tls_certificate_sds_secret_configs:
            - name: server_cert
              sds_config:
                resource_api_version: V3
                path_config_source:
                  path: /etc/envoy/sds.yaml
                  watched_directory: {path: /certs}
            validation_context:
              trusted_ca: {filename: /certs/ca.crt}`),
	"sds.yaml": `resources:
- "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
  name: server_cert
  tls_certificate:
    certificate_chain: {filename: /certs/tls.crt}
    private_key: {filename: /certs/tls.key}
`,
}

// localAdminFiles: static certificate files, admin on 127.0.0.1 only.
var localAdminFiles = map[string]string{
	"envoy.yaml": bootstrap("local-admin", "127.0.0.1", `            tls_certificates:
            - certificate_chain: {filename: /certs/tls.crt}
              private_key: {filename: /certs/tls.key}`),
}
