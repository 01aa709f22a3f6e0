package scenarios

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/test/cdbin"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/readmeblock"
	"github.com/certdrift/certdrift/test/shardcheck"
	"github.com/certdrift/certdrift/test/testbed"
	corev1 "k8s.io/api/core/v1"
)

// TestEGGateway: the real Envoy Gateway control plane (envoy-gateway server, its certgen
// Secrets) provisions the proxy for a Gateway whose HTTPS listener names a kubernetes.io/tls
// Secret; the proxy's Envoy, connected to it over xDS with mTLS, receives that certificate over
// xDS SDS (secret "eg-gateway/web-tls") and serves it. certdrift must bind that SDS secret to the
// Secret and find the served, loaded and desired certificates the same.
func TestEGGateway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const ns, host = "eg-gateway", "www.example.com"
	eg := testbed.StartEnvoyGatewayT(t, tb, testbed.EnvoyGatewayOptions{})
	t.Logf("%s", eg.Version)

	ca := certs.NewCA(t)
	v1 := ca.Leaf(t, certs.WithDNSNames(host))
	// As the README says to by hand: the Gateway API objects are not in client-go's scheme, so
	// kubectl applies the manifests.
	if out, err := tb.Kubectl(ctx, "apply", "-f", filepath.Join(ns, "00-namespace.yaml")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	applyObjects(ctx, t, tlsSecret(ns, "web-tls", v1))
	applied := time.Now()
	if out, err := tb.Kubectl(ctx, "apply", "-f", filepath.Join(ns, "gateway.yaml")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	selector := "gateway.envoyproxy.io/owning-gateway-namespace=" + ns + ",gateway.envoyproxy.io/owning-gateway-name=web"
	// Leave no proxy behind: a later scenario auditing envoy-gateway-system would see it.
	cleanupEGObjects(t, filepath.Join(ns, "gateway.yaml"), "gateway.envoyproxy.io/owning-gateway-namespace="+ns)
	pods := waitReady(ctx, t, testbed.EnvoyGatewayNamespace, selector, 1)
	p := pods[0]
	poll(ctx, t, "proxy "+p.Name+" serving the Gateway's certificate over its HTTPS listener", func() error {
		return servesErr(tlsGet(hostPort(p.Status.PodIP, 8443), host, nil), v1.Cert)
	})
	t.Logf("OBSERVED: proxy %s serves web-tls (serial %s) %s after the Gateway was applied", p.Name, v1.Cert.SerialNumber, time.Since(applied).Round(10*time.Millisecond))

	// The certificate reached Envoy over xDS SDS from the control plane, not from a file: the
	// proxy mounts no volume of web-tls (its only Secret volume is certgen's "envoy").
	for _, v := range p.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "web-tls" {
			t.Errorf("proxy mounts web-tls as volume %s: the scenario is meant to deliver it over SDS", v.Name)
		}
	}

	code, r := runAudit(t, testbed.EnvoyGatewayNamespace+","+ns, "--grace", "1s")
	want := ns + "/web-tls"
	found := false
	for _, b := range r.Bindings {
		t.Logf("OBSERVED: binding %s %s trust=%v -> Secret %q state %s origin %s (%s)", b.Envoy, b.Source, b.Trust, b.Secret, b.State, b.Origin, b.Reason)
	}
	for _, b := range r.Bindings {
		if b.Source == want || strings.HasSuffix(b.Source, want) {
			found = true
			t.Logf("OBSERVED: binding %s %s -> Secret %q state %s origin %s (%s)", b.Envoy, b.Source, b.Secret, b.State, b.Origin, b.Reason)
			if b.Secret != want {
				t.Errorf("SDS secret %s is bound to %q, want the Secret %s", b.Source, b.Secret, want)
			}
			if b.State != "converged" {
				t.Errorf("binding %s is %s, want converged (served, loaded and desired are the same certificate): %s", b.Source, b.State, b.Reason)
			}
		}
	}
	if !found {
		t.Errorf("certdrift reported no binding for the SDS secret %s; bindings: %+v", want, r.Bindings)
	}
	if got := r.findings(); len(got) != 0 || code != 0 {
		t.Errorf("audit of the converged Gateway: exit %d, findings %v; want 0 and none", code, got)
	}
	// The proxy (envoy-gateway-system) serves a Secret of another namespace, named over SDS: a
	// shard that owns the proxy but not the Secret must still judge it, and expose it once.
	shardcheck.Agree(t, certdriftBinary(t), tb.KubeconfigPath, "--namespace", testbed.EnvoyGatewayNamespace+","+ns, "--grace", "1s")
	// The README's Kubernetes section shows this audit as the table a user sees (issue 18).
	egREADME.Check(t, auditTable(t, testbed.EnvoyGatewayNamespace+","+ns), *updateREADME)

	// A rotation while the control plane runs: it reads the updated Secret and pushes it over
	// SDS; the proxy serves the new leaf and certdrift finds everything converged again.
	v2 := ca.Leaf(t, certs.WithDNSNames(host))
	rotated := time.Now()
	updateSecretData(ctx, t, ns, "web-tls", map[string][]byte{corev1.TLSCertKey: v2.CertPEM, corev1.TLSPrivateKeyKey: v2.KeyPEM})
	poll(ctx, t, "proxy "+p.Name+" serving the rotated web-tls", func() error {
		return servesErr(tlsGet(hostPort(p.Status.PodIP, 8443), host, nil), v2.Cert)
	})
	t.Logf("OBSERVED: proxy serves the rotated web-tls (serial %s) %s after the Secret update, pushed over SDS", v2.Cert.SerialNumber, time.Since(rotated).Round(10*time.Millisecond))
	code, r = runAudit(t, testbed.EnvoyGatewayNamespace+","+ns, "--grace", "1s")
	if got := r.findings(); len(got) != 0 || code != 0 {
		t.Errorf("audit after the rotation converged: exit %d, findings %v; want 0 and none", code, got)
	}
	for _, b := range r.Bindings {
		if b.Source == want && (b.Secret != want || b.State != "converged") {
			t.Errorf("after the rotation: binding %s -> %q is %s, want %s converged", b.Source, b.Secret, b.State, want)
		}
	}

	// A broken rotation: another certificate with v2's key. The issue expected the proxy to
	// reject it and keep serving v2 (ROTATION_FAILED); the real control plane never pushes it:
	// it marks the listener ResolvedRefs=False (InvalidCertificateRef) and withdraws it from the
	// proxy, so the port stops accepting connections. certdrift must say why: KEY_MISMATCH on
	// the Secret.
	bad := ca.Leaf(t, certs.WithDNSNames(host))
	badAt := time.Now()
	updateSecretData(ctx, t, ns, "web-tls", map[string][]byte{corev1.TLSCertKey: bad.CertPEM, corev1.TLSPrivateKeyKey: v2.KeyPEM})
	poll(ctx, t, "the HTTPS listener withdrawn after the mismatched Secret", func() error {
		if ex := tlsGet(hostPort(p.Status.PodIP, 8443), host, nil); ex.err == nil || !strings.Contains(ex.err.Error(), "connection refused") {
			return fmt.Errorf("handshake: served %s, err %v; want connection refused", serial(ex.leaf), ex.err)
		}
		return nil
	})
	t.Logf("OBSERVED: listener 8443 refuses connections %s after the mismatched Secret was written", time.Since(badAt).Round(10*time.Millisecond))
	code, r = runAudit(t, testbed.EnvoyGatewayNamespace+","+ns, "--grace", "1ms")
	if !slices.Contains(sourceCodes(r, want), "KEY_MISMATCH") || code == 0 {
		t.Errorf("audit with a mismatched key in %s: exit %d, codes on it %v; want KEY_MISMATCH and a non-zero exit", want, code, sourceCodes(r, want))
	}
	updateSecretData(ctx, t, ns, "web-tls", map[string][]byte{corev1.TLSCertKey: v2.CertPEM, corev1.TLSPrivateKeyKey: v2.KeyPEM})
	poll(ctx, t, "the HTTPS listener back with v2 after the Secret was repaired", func() error {
		return servesErr(tlsGet(hostPort(p.Status.PodIP, 8443), host, nil), v2.Cert)
	})

	// Control case: a Secret that does not match what Envoy serves must be seen. Replace the
	// Secret's content with another certificate while the control plane is stopped, so the
	// proxy keeps the old one: desired (the Secret) and loaded/served (Envoy) now differ.
	if err := eg.Stop(); err != nil {
		t.Fatalf("stop envoy-gateway: %v", err)
	}
	v3 := ca.Leaf(t, certs.WithDNSNames(host))
	updateSecretData(ctx, t, ns, "web-tls", map[string][]byte{corev1.TLSCertKey: v3.CertPEM, corev1.TLSPrivateKeyKey: v3.KeyPEM})
	if err := servesErr(tlsGet(hostPort(p.Status.PodIP, 8443), host, nil), v2.Cert); err != nil {
		t.Fatalf("with the control plane stopped the proxy should still serve the old certificate: %v", err)
	}
	// --grace 1ms: the Secret changed a moment ago, and a longer grace would still excuse it
	// (0 means the policy's default, 2m).
	code, r = runAudit(t, testbed.EnvoyGatewayNamespace+","+ns, "--grace", "1ms")
	drift := sourceCodes(r, want)
	t.Logf("OBSERVED: findings on %s with the control plane stopped and the Secret replaced: %v", want, drift)
	if code == 0 || len(drift) == 0 {
		t.Errorf("audit after the Secret changed under a proxy that cannot hear of it: exit %d, findings %v; want drift reported on %s", code, r.findings(), want)
	}
}

var updateREADME = flag.Bool("update", false, "rewrite README.md's eg-gateway audit block with this run's table")

// egREADME is README.md's block with TestEGGateway's converged audit as a table. Beyond what
// changes in every certdrift run it varies with the cluster: pod IPs and ports, and the hashes
// in the proxy's pod name.
var egREADME = readmeblock.Block{
	Path:   "../../README.md",
	Name:   "eg-gateway audit",
	Update: "go test ./test/scenarios -run 'TestEGGateway$' -update",
	Rules: []readmeblock.Rule{
		{Re: regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(:\d+)?\b`), With: "<ip>"},
		{Re: regexp.MustCompile(`\b(envoy-[a-z0-9-]+?)-[a-z0-9]{6,10}-[a-z0-9]{5}\b`), With: "$1-<pod>"},
	},
	Control: [2]string{"CONVERGED", "STALE"},
}

// auditTable runs `certdrift audit` with its default table output, as the README shows it, and
// returns the command line and the output. The kubeconfig is the testbed's; the README names it K.
func auditTable(t *testing.T, ns string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := cdbin.Run(ctx, certdriftBinary(t), []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()},
		"audit", "--kubeconfig", tb.KubeconfigPath, "--namespace", ns)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Stdout+res.Stderr, "PRIVATE KEY") {
		t.Fatalf("certdrift printed private key material")
	}
	t.Logf("OBSERVED: certdrift audit -n %s (table): exit %d\n%s", ns, res.Code, res.Stdout)
	return fmt.Sprintf("$ certdrift audit --kubeconfig K --namespace %s\n%s(exit code %d)\n", ns, res.Stdout, res.Code)
}

// sourceCodes lists the codes of the findings on one desired source.
func sourceCodes(r auditReport, source string) []string {
	var out []string
	for _, f := range r.Findings {
		if f.Subject.Source == source {
			out = append(out, f.Code)
		}
	}
	return out
}
