package scenarios

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/test/cdbin"
	"github.com/certdrift/certdrift/test/testbed"
)

var certgenSecrets = []string{"envoy-gateway", "envoy", "envoy-rate-limit"}

// egcaCA is a CA minted the way certgen mints one: self-signed, for signing the three leaves.
type egcaCA struct {
	cert *x509.Certificate
	pem  []byte
	key  *ecdsa.PrivateKey
}

func newEGCA(t *testing.T, cn string) egcaCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return egcaCA{cert: c, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// reissue signs a new leaf with cur's names and usages (what certgen issues each component) by ca.
func (ca egcaCA) reissue(t *testing.T, cur *x509.Certificate) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: cur.Subject, DNSNames: cur.DNSNames,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(90 * 24 * time.Hour), KeyUsage: cur.KeyUsage, ExtKeyUsage: cur.ExtKeyUsage}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// secretManifest writes what `kubectl create secret … --dry-run=client -o yaml` writes for one of
// certgen's Secrets (the real kubectl), and returns it.
func secretManifest(ctx context.Context, t *testing.T, name string, certPEM, keyPEM, caPEM []byte) []byte {
	t.Helper()
	dir := t.TempDir()
	files := map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": caPEM}
	args := []string{"-n", testbed.EnvoyGatewayNamespace, "create", "secret", "generic", name, "--type=kubernetes.io/tls", "--dry-run=client", "-o", "yaml"}
	for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
		p := filepath.Join(dir, k)
		if err := os.WriteFile(p, files[k], 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--from-file="+k+"="+p)
	}
	out, err := tb.Kubectl(ctx, args...)
	if err != nil {
		t.Fatalf("kubectl create secret %s --dry-run: %v", name, err) // its output may hold the key
	}
	return out
}

// writeManifests joins Secret manifests as YAML documents into one file.
func writeManifests(t *testing.T, docs [][]byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rotation.yaml")
	var b []byte
	for _, d := range docs {
		b = append(append(b, "---\n"...), d...)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// runPreflight runs `certdrift preflight --kubeconfig … -o json` and decodes its report.
func runPreflight(t *testing.T, ns string, args ...string) (int, audit.PreflightReport) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	full := append([]string{"preflight", "--kubeconfig", tb.KubeconfigPath, "--namespace", ns, "-o", "json"}, args...)
	start := time.Now()
	res, err := cdbin.Run(ctx, certdriftBinary(t), []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, full...)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Stdout+res.Stderr, "PRIVATE KEY") {
		t.Fatalf("certdrift preflight printed private key material")
	}
	var r audit.PreflightReport
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("certdrift preflight: exit %d, report is not JSON: %v\n%s", res.Code, err, res.Output())
	}
	t.Logf("OBSERVED: certdrift preflight %s: exit %d, verdict %s, %d handshakes, %s wall", strings.Join(args, " "), res.Code, r.Verdict, len(r.Handshakes), time.Since(start).Round(time.Millisecond))
	for _, h := range r.Handshakes {
		t.Logf("OBSERVED:   %s [%s] %s", strings.ToUpper(h.Result), h.Phase, h.Message)
	}
	for _, x := range r.Reloads {
		t.Logf("OBSERVED:   reload %s %s %s: %s (%s)", x.Envoy, x.Source, x.What, x.Mode, x.Why)
	}
	for _, s := range r.Steps {
		t.Logf("OBSERVED:   step %s", s)
	}
	for _, a := range r.Assumptions {
		t.Logf("OBSERVED:   assumed: %s", a)
	}
	return res.Code, r
}

// predicted lists a preflight's handshakes as "result phase verifier <- presenter", the control
// plane (not an Envoy) as "control-plane", sorted.
func predicted(r audit.PreflightReport, proxy string) []string {
	name := func(s string) string {
		switch {
		case strings.Contains(s, "not an Envoy"):
			return "control-plane"
		case strings.HasPrefix(s, "every verifier"):
			return "every-verifier"
		case s == proxy:
			return "proxy"
		case strings.Contains(s, "/envoy-ratelimit-"):
			return "rate-limit"
		case strings.HasPrefix(s, "an Envoy loading "): // new_leaf_own_key
			return "loader " + strings.TrimPrefix(s, "an Envoy loading ")
		case strings.HasPrefix(s, "audit of "): // new_leaf_own_bundle
			return "audit " + strings.Fields(s)[2]
		}
		return s
	}
	var out []string
	for _, h := range r.Handshakes {
		out = append(out, h.Result+" "+h.Phase+" "+name(h.Verifier)+" <- "+name(h.Presenter))
	}
	slices.Sort(out)
	return out
}

// replaceProxy deletes proxy p and returns its Running replacement once ok accepts its xDS stats.
func replaceProxy(ctx context.Context, t *testing.T, w *egcaWorld, p corev1.Pod, what string, ok func(map[string]int) error) corev1.Pod {
	t.Helper()
	if err := tb.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var q corev1.Pod
	poll(ctx, t, what, func() error {
		pods, err := tb.Client.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{LabelSelector: w.selector})
		if err != nil {
			return err
		}
		for _, c := range pods.Items {
			if c.Name == p.Name || c.Status.Phase != corev1.PodRunning || c.Status.PodIP == "" || c.DeletionTimestamp != nil {
				continue
			}
			if _, _, err := podGet(ctx, c.Namespace, c.Name, 19000, "/ready"); err != nil {
				continue
			}
			q = c
			return ok(adminStats(ctx, t, c, 19000))
		}
		return fmt.Errorf("no replacement yet")
	})
	return q
}

func keyPair(t *testing.T, certPEM, keyPEM []byte) tls.Certificate {
	t.Helper()
	kp, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// TestEGPreflight: certdrift preflight on the real Envoy Gateway v1.9.1 control plane and proxy,
// then the rotations it judged, applied, and the handshakes it named checked on the real parts.
//  1. A certgen-style CA rotation without the bundle (new CA, every leaf reissued by it,
//     ca.crt = [new CA]: what certgen v1.9.1 writes): preflight exits 1 and names the four
//     proxy ↔ control plane handshakes that fail in some window; the same three Secrets with
//     ca.crt = [new, old] and the leaves kept (step 1 of the safe order) exit 0.
//  2. The rotation without the bundle applied (kubectl apply of the manifests preflight read)
//     while the control plane's volume is held: each predicted rejection is confirmed.
//  3. Step 1 of the next rotation (ca.crt = [newer, new], leaves kept): preflight exits 0, it is
//     applied the same way, and the handshakes it judged are confirmed to hold.
func TestEGPreflight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	egNS := testbed.EnvoyGatewayNamespace
	w := startEGCA(ctx, t)
	eg, p := w.eg, w.proxy
	proxyName := egNS + "/" + p.Name
	cfg := writeConfig(t, `pairings:
- name: proxy-control-plane
  bundle: {source: `+egNS+`/envoy}
  leaf: {source: `+egNS+`/envoy-gateway}
  mutual: true
`)
	// The Secrets as certgen wrote them at install, with their keys (to act as each component).
	ca1 := readCertgenAll(ctx, t)
	if leaf, err := xdsHandshake(ctx, eg, ca1["envoy"].keyPair); err != nil || !sameCert(leaf, ca1["envoy-gateway"].leaf) {
		t.Fatalf("before: control plane served %s, err %v; want the envoy-gateway leaf accepted", serial(leaf), err)
	}

	// 1. Preflight, certgen-style without the bundle, and step 1 with it.
	ca2 := newEGCA(t, "envoy-gateway CA 2")
	newPair := map[string][2][]byte{}
	var noBundle, withBundle [][]byte
	for _, n := range certgenSecrets {
		c, k := ca2.reissue(t, ca1[n].leaf)
		newPair[n] = [2][]byte{c, k}
		noBundle = append(noBundle, secretManifest(ctx, t, n, c, k, ca2.pem))
		withBundle = append(withBundle, secretManifest(ctx, t, n, ca1[n].certPEM, ca1[n].keyPEM, append(append([]byte{}, ca2.pem...), ca1[n].caPEM...)))
	}
	noBundlePath, withBundlePath := writeManifests(t, noBundle), writeManifests(t, withBundle)
	ns := egNS + "," + egcaNS
	code, r := runPreflight(t, ns, "--config", cfg, "--secret", noBundlePath)
	wantBreaks := []string{
		"accepts new_leaf_new_bundle every-verifier <- control-plane",
		"accepts new_leaf_new_bundle every-verifier <- proxy",
		// certgen's own output is consistent: each new leaf matches its tls.key and verifies
		// with its Secret's new ca.crt.
		"accepts new_leaf_own_bundle audit " + egNS + "/envoy <- proxy",
		"accepts new_leaf_own_bundle audit " + egNS + "/envoy-gateway <- control-plane",
		"accepts new_leaf_own_bundle audit " + egNS + "/envoy-rate-limit <- rate-limit",
		"accepts new_leaf_own_key loader " + egNS + "/envoy <- proxy",
		"accepts new_leaf_own_key loader " + egNS + "/envoy-gateway <- control-plane",
		"accepts new_leaf_own_key loader " + egNS + "/envoy-rate-limit <- rate-limit",
		"rejects current_leaf_new_bundle control-plane <- proxy",
		"rejects current_leaf_new_bundle proxy <- control-plane",
		"rejects new_leaf_current_trust control-plane <- proxy",
		"rejects new_leaf_current_trust proxy <- control-plane",
	}
	if got := predicted(r, proxyName); code != 1 || r.Verdict != audit.PreflightBreaks || !slices.Equal(got, wantBreaks) {
		t.Errorf("preflight of the rotation without the bundle: exit %d, verdict %s, handshakes\n  %s\nwant exit 1, breaks,\n  %s", code, r.Verdict, strings.Join(got, "\n  "), strings.Join(wantBreaks, "\n  "))
	}
	if !slices.ContainsFunc(r.Reloads, func(x audit.PreflightReload) bool {
		return strings.Contains(x.Envoy, "envoy-ratelimit") && x.Mode == audit.ReloadRestart
	}) {
		t.Errorf("preflight reloads %+v: want the rate limit named as needing a restart", r.Reloads)
	}
	// The same run as people read it (docs/preflight.md, README).
	if res, err := cdbin.Run(ctx, certdriftBinary(t), []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()},
		"preflight", "--kubeconfig", tb.KubeconfigPath, "--namespace", ns, "--config", cfg, "--secret", noBundlePath); err != nil || res.Code != 1 || strings.Contains(res.Stdout, "PRIVATE KEY") {
		t.Errorf("preflight table: exit %d, err %v", res.Code, err)
	} else {
		t.Logf("OBSERVED table (exit %d):\n%s", res.Code, res.Stdout)
	}
	for _, what := range []string{"leaf", "bundle"} {
		if !slices.ContainsFunc(r.Reloads, func(x audit.PreflightReload) bool {
			return x.Envoy == proxyName && x.Source == egNS+"/envoy" && x.What == what && x.Mode == audit.ReloadSelf
		}) {
			t.Errorf("preflight reloads %+v: want the proxy to load the new %s of envoy by itself (file-based SDS)", r.Reloads, what)
		}
	}
	code, r = runPreflight(t, ns, "--config", cfg, "--secret", withBundlePath)
	wantSafe := []string{
		"accepts current_leaf_new_bundle control-plane <- proxy",
		"accepts current_leaf_new_bundle proxy <- control-plane",
	}
	if got := predicted(r, proxyName); code != 0 || r.Verdict != audit.PreflightSafe || !slices.Equal(got, wantSafe) {
		t.Errorf("preflight of step 1 (bundle [new, old], leaves kept): exit %d, verdict %s, handshakes %v; want exit 0, safe, %v", code, r.Verdict, got, wantSafe)
	}

	// 2. Apply the rotation without the bundle while the control plane's volume is held: the
	// proxy loads the new leaf and [CA2], the control plane keeps the CA1 files.
	eg.HoldCerts()
	if out, err := tb.Kubectl(ctx, "apply", "-f", noBundlePath); err != nil {
		t.Fatalf("kubectl apply the rotation: %v\n%s", err, out)
	}
	// Predicted: the proxy loads the new leaf and bundle by itself.
	loadedAt := time.Now()
	poll(ctx, t, "the proxy loading the new envoy leaf by itself", func() error {
		if !slices.Contains(adminSerials(ctx, t, p, 19000), firstCert(t, "new envoy", newPair["envoy"][0]).SerialNumber.String()) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	t.Logf("OBSERVED confirmed: proxy %s loaded the new envoy leaf by itself %s after the apply", p.Name, time.Since(loadedAt).Round(10*time.Millisecond))
	newEnvoy := keyPair(t, newPair["envoy"][0], newPair["envoy"][1])
	oldEnvoy := ca1["envoy"].keyPair
	// rejects new_leaf_current_trust control-plane <- proxy: the held control plane refuses the
	// proxy's new leaf; control: it still accepts the old one.
	if _, err := xdsHandshake(ctx, eg, newEnvoy); err == nil {
		t.Errorf("held control plane accepted the new envoy leaf; preflight predicted a rejection")
	} else {
		t.Logf("OBSERVED confirmed: the held control plane refuses the proxy's new leaf: %v", err)
	}
	if _, err := xdsHandshake(ctx, eg, oldEnvoy); err != nil {
		t.Errorf("control: the held control plane refused the old envoy leaf: %v", err)
	}
	// rejects current_leaf_new_bundle proxy <- control-plane: a proxy that starts now trusts
	// [CA2] and refuses the control plane's CA1 leaf.
	p = replaceProxy(ctx, t, w, p, "a replacement proxy failing to verify the held control plane", func(s map[string]int) error {
		if s["cluster.xds_cluster.ssl.fail_verify_error"] == 0 || s["control_plane.connected_state"] != 0 {
			return fmt.Errorf("%s", xdsStats(s))
		}
		return nil
	})
	t.Logf("OBSERVED confirmed: replacement proxy %s refuses the control plane's current leaf: xDS %s", p.Name, xdsStats(adminStats(ctx, t, p, 19000)))
	if err := eg.ReleaseCerts(ctx); err != nil {
		t.Fatal(err)
	}
	// rejects current_leaf_new_bundle control-plane <- proxy: the control plane on [CA2] refuses
	// the proxy's old leaf; accepts new_leaf_new_bundle: it takes the new one.
	var cpLeaf *x509.Certificate
	poll(ctx, t, "the released control plane accepting the new envoy leaf", func() error {
		leaf, err := xdsHandshake(ctx, eg, newEnvoy)
		cpLeaf = leaf
		return err
	})
	if _, err := xdsHandshake(ctx, eg, oldEnvoy); err == nil {
		t.Errorf("the control plane on [CA2] accepted the old envoy leaf; preflight predicted a rejection")
	} else {
		t.Logf("OBSERVED confirmed: the control plane on [CA2] refuses the proxy's old leaf: %v", err)
	}
	// rejects new_leaf_current_trust proxy <- control-plane: the leaf the control plane serves now
	// is refused by the trust the proxy had loaded before (CA1): verified here with that bundle,
	// since no proxy on the old trust is left to dial it; accepted with [CA2] (control).
	verify := func(leaf *x509.Certificate, cas ...*x509.Certificate) error {
		pool := x509.NewCertPool()
		for _, c := range cas {
			pool.AddCert(c)
		}
		_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		return err
	}
	if !sameCert(cpLeaf, firstCert(t, "new envoy-gateway", newPair["envoy-gateway"][0])) {
		t.Errorf("the released control plane serves %s, want the new envoy-gateway leaf", serial(cpLeaf))
	} else if err := verify(cpLeaf, ca1["envoy"].cas...); err == nil {
		t.Errorf("the proxy's old trust accepts the control plane's new leaf; preflight predicted a rejection")
	} else if err2 := verify(cpLeaf, ca2.cert); err2 != nil {
		t.Errorf("control: [CA2] refuses the control plane's new leaf: %v", err2)
	} else {
		t.Logf("OBSERVED confirmed: the control plane now serves the new envoy-gateway leaf, which the proxy's old trust [CA1] refuses (%v) and [CA2] accepts", err)
	}
	// accepts new_leaf_new_bundle every-verifier <- control-plane: the replacement proxy connects.
	w.connected(ctx, t, p, "the replacement proxy connected once the control plane has the new Secret")

	// 3. Step 1 of the next rotation: ca.crt = [CA3, CA2], leaves kept.
	ca2now := readCertgenAll(ctx, t)
	ca3 := newEGCA(t, "envoy-gateway CA 3")
	var step1 [][]byte
	for _, n := range certgenSecrets {
		step1 = append(step1, secretManifest(ctx, t, n, ca2now[n].certPEM, ca2now[n].keyPEM, append(append([]byte{}, ca3.pem...), ca2now[n].caPEM...)))
	}
	step1Path := writeManifests(t, step1)
	proxyName = egNS + "/" + p.Name
	code, r = runPreflight(t, ns, "--config", cfg, "--secret", step1Path)
	if got := predicted(r, proxyName); code != 0 || r.Verdict != audit.PreflightSafe || !slices.Equal(got, wantSafe) {
		t.Errorf("preflight of step 1 of the next rotation: exit %d, verdict %s, handshakes %v; want exit 0, safe, %v", code, r.Verdict, got, wantSafe)
	}
	eg.HoldCerts()
	if out, err := tb.Kubectl(ctx, "apply", "-f", step1Path); err != nil {
		t.Fatalf("kubectl apply step 1: %v\n%s", err, out)
	}
	// accepts current_leaf_new_bundle proxy <- control-plane: a proxy starting on [CA3, CA2]
	// connects to the held control plane (CA2 leaf).
	p = replaceProxy(ctx, t, w, p, "a replacement proxy on [CA3, CA2] connected to the held control plane", func(s map[string]int) error {
		if s["control_plane.connected_state"] != 1 || s["cluster.xds_cluster.ssl.fail_verify_error"] != 0 {
			return fmt.Errorf("%s", xdsStats(s))
		}
		return nil
	})
	t.Logf("OBSERVED confirmed: replacement proxy %s on [CA3, CA2] connects: xDS %s", p.Name, xdsStats(adminStats(ctx, t, p, 19000)))
	if err := eg.ReleaseCerts(ctx); err != nil {
		t.Fatal(err)
	}
	// accepts current_leaf_new_bundle control-plane <- proxy: the control plane on [CA3, CA2]
	// accepts the proxy's CA2 leaf.
	cur := ca2now["envoy"].keyPair // Release projected the Secret at once
	if _, err := xdsHandshake(ctx, eg, cur); err != nil {
		t.Errorf("the control plane on [CA3, CA2] refused the proxy's CA2 leaf: %v; preflight predicted it accepts", err)
	} else {
		t.Logf("OBSERVED confirmed: the control plane on [CA3, CA2] accepts the proxy's CA2 leaf")
	}
	w.connected(ctx, t, p, "the proxy still connected after the control plane's sync")
}
