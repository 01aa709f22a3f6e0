package testbed

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var (
	gatewayClassGVR = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gatewayclasses"}
	gatewayGVR      = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}
	envoyProxyGVR   = schema.GroupVersionResource{Group: "gateway.envoyproxy.io", Version: "v1alpha1", Resource: "envoyproxies"}
)

// TestEnvoyGateway runs the real Envoy Gateway control plane against the testbed: certgen's
// Secrets, a GatewayClass and Gateway it reconciles, and the Envoy proxy Deployment it
// provisions. A second GatewayClass naming another controller is the control case: the control
// plane must leave it, and its Gateway, alone.
func TestEnvoyGateway(t *testing.T) {
	begin := time.Now()
	tb := StartT(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	eg := StartEnvoyGatewayT(t, tb, EnvoyGatewayOptions{})
	t.Logf("MEASURED: envoy-gateway ready %s after testbed start (%s), testbed start %s",
		time.Since(begin).Round(10*time.Millisecond)-tb.StartDuration.Round(10*time.Millisecond), eg.Version, tb.StartDuration.Round(10*time.Millisecond))

	t.Run("CertgenSecrets", func(t *testing.T) { checkCertgenSecrets(ctx, t, tb) })

	dyn, err := dynamic.NewForConfig(tb.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := "eg-test"
	if _, err := tb.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The proxy's Service as ClusterIP: nothing on the testbed assigns LoadBalancer addresses,
	// and the Gateway is Programmed only once it has an address.
	ep := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "EnvoyProxy",
		"metadata": map[string]any{"name": "cluster-ip", "namespace": EnvoyGatewayNamespace},
		"spec": map[string]any{"provider": map[string]any{"type": "Kubernetes",
			"kubernetes": map[string]any{"envoyService": map[string]any{"type": "ClusterIP"}}}},
	}}
	if _, err := dyn.Resource(envoyProxyGVR).Namespace(EnvoyGatewayNamespace).Create(ctx, ep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create EnvoyProxy: %v", err)
	}
	for _, c := range []struct{ class, controller, gateway string }{
		{"eg", EnvoyGatewayControllerName, "gw"},
		{"other", "example.com/other-controller", "gw-other"},
	} {
		gc := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
			"metadata": map[string]any{"name": c.class},
			"spec": map[string]any{"controllerName": c.controller, "parametersRef": map[string]any{
				"group": "gateway.envoyproxy.io", "kind": "EnvoyProxy", "name": "cluster-ip", "namespace": EnvoyGatewayNamespace}},
		}}
		if _, err := dyn.Resource(gatewayClassGVR).Create(ctx, gc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create GatewayClass %s: %v", c.class, err)
		}
		gw := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
			"metadata": map[string]any{"name": c.gateway, "namespace": ns},
			"spec": map[string]any{
				"gatewayClassName": c.class,
				"listeners":        []any{map[string]any{"name": "http", "protocol": "HTTP", "port": int64(8080)}},
			},
		}}
		if _, err := dyn.Resource(gatewayGVR).Namespace(ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create Gateway %s: %v", c.gateway, err)
		}
	}
	applied := time.Now()

	waitCondition(ctx, t, dyn.Resource(gatewayClassGVR), "eg", "Accepted", "True")
	t.Logf("MEASURED: GatewayClass eg Accepted %s after apply", time.Since(applied).Round(10*time.Millisecond))
	waitCondition(ctx, t, dyn.Resource(gatewayGVR).Namespace(ns), "gw", "Accepted", "True")
	t.Logf("MEASURED: Gateway gw Accepted %s after apply", time.Since(applied).Round(10*time.Millisecond))

	owned := "gateway.envoyproxy.io/owning-gateway-namespace=" + ns + ",gateway.envoyproxy.io/owning-gateway-name="
	deploy := waitDeployment(ctx, t, tb, EnvoyGatewayNamespace, owned+"gw")
	t.Logf("MEASURED: proxy Deployment %s created %s after apply", deploy.Name, time.Since(applied).Round(10*time.Millisecond))
	var names []string
	for _, c := range deploy.Spec.Template.Spec.Containers {
		names = append(names, c.Name+"="+c.Image)
	}
	t.Logf("proxy Deployment containers: %s", strings.Join(names, " "))
	if !slices.ContainsFunc(deploy.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "envoy" && isEnvoyImage(c.Image) }) {
		t.Errorf("proxy Deployment %s has no envoy container running an Envoy image: %s", deploy.Name, names)
	}

	// Step 3 of issue 18: the proxy pod's Envoy, run by the node agent, connected over xDS
	// with mTLS to the real control plane through the Service relay.
	pods, err := tb.WaitPodsReady(ctx, EnvoyGatewayNamespace, owned+"gw")
	if err != nil {
		t.Fatalf("proxy pods: %v", err)
	}
	t.Logf("MEASURED: proxy pod %s Ready %s after apply", pods[0].Name, time.Since(applied).Round(10*time.Millisecond))
	admin := func(path string) (string, error) {
		return adminGet(ctx, tb, EnvoyGatewayNamespace, pods[0].Name, 19000, path)
	}
	if err := waitFunc(ctx, func() error {
		out, err := admin("/stats?filter=^control_plane.connected_state$")
		if err == nil && strings.TrimSpace(out) != "control_plane.connected_state: 1" {
			err = fmt.Errorf("%q", strings.TrimSpace(out))
		}
		return err
	}); err != nil {
		t.Fatalf("proxy never connected to the control plane over xDS: %v", err)
	}
	t.Logf("MEASURED: proxy connected to the control plane %s after apply", time.Since(applied).Round(10*time.Millisecond))
	if err := waitFunc(ctx, func() error {
		out, err := admin("/listeners")
		if err == nil && !strings.Contains(out, ns+"/gw/http") {
			err = fmt.Errorf("no listener %s/gw/http in %q", ns, out)
		}
		return err
	}); err != nil {
		t.Errorf("the Gateway's listener never arrived over LDS: %v", err)
	}

	t.Run("OtherControllerLeftAlone", func(t *testing.T) {
		// The control plane reconciles every GatewayClass in one pass, so by the time gw's
		// Deployment exists it has seen "other" as well.
		if s := conditionStatus(ctx, t, dyn.Resource(gatewayClassGVR), "other", "Accepted"); s == "True" {
			t.Errorf("GatewayClass other (another controller) is Accepted=True: the check would pass for any class")
		}
		ds, err := tb.Client.AppsV1().Deployments(EnvoyGatewayNamespace).List(ctx, metav1.ListOptions{LabelSelector: owned + "gw-other"})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds.Items) != 0 {
			t.Errorf("a proxy Deployment was created for gw-other, whose class names another controller")
		}
	})

	waitCondition(ctx, t, dyn.Resource(gatewayGVR).Namespace(ns), "gw", "Programmed", "True")
	t.Logf("MEASURED: Gateway gw Programmed %s after apply", time.Since(applied).Round(10*time.Millisecond))
	gw, err := dyn.Resource(gatewayGVR).Namespace(ns).Get(ctx, "gw", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conds, _, _ := unstructured.NestedSlice(gw.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		t.Logf("Gateway gw condition %v=%v reason=%v: %v", m["type"], m["status"], m["reason"], m["message"])
	}
	if err := eg.Exited(); err != nil {
		t.Errorf("envoy-gateway server: %v\n%s", err, eg.LogTail(30))
	}
}

// checkCertgenSecrets checks what certgen wrote: three kubernetes.io/tls Secrets whose leaves
// chain to one CA, the ca.crt each carries. Only names and subjects are reported.
func checkCertgenSecrets(ctx context.Context, t *testing.T, tb *Testbed) {
	var caPEM []byte
	for _, name := range []string{"envoy-gateway", "envoy", "envoy-rate-limit"} {
		s, err := tb.Client.CoreV1().Secrets(EnvoyGatewayNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("certgen Secret %s: %v", name, err)
			continue
		}
		if s.Type != corev1.SecretTypeTLS {
			t.Errorf("Secret %s has type %s, want %s", name, s.Type, corev1.SecretTypeTLS)
		}
		for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
			if len(s.Data[k]) == 0 {
				t.Errorf("Secret %s has no %s", name, k)
			}
		}
		if caPEM == nil {
			caPEM = s.Data["ca.crt"]
		} else if string(caPEM) != string(s.Data["ca.crt"]) {
			t.Errorf("Secret %s carries another ca.crt than envoy-gateway's: certgen uses one CA", name)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(s.Data["ca.crt"]) {
			t.Errorf("Secret %s: ca.crt holds no certificate", name)
			continue
		}
		block, _ := pem.Decode(s.Data["tls.crt"])
		if block == nil {
			t.Errorf("Secret %s: tls.crt is not PEM", name)
			continue
		}
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Errorf("Secret %s: tls.crt: %v", name, err)
			continue
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("Secret %s: leaf %s does not chain to its ca.crt: %v", name, leaf.Subject, err)
		}
		t.Logf("certgen Secret %s: leaf %s DNS %v, serial %s", name, leaf.Subject, leaf.DNSNames, leaf.SerialNumber)
	}
	if _, err := tb.Client.CoreV1().Secrets(EnvoyGatewayNamespace).Get(ctx, "envoy-oidc-hmac", metav1.GetOptions{}); err != nil {
		t.Errorf("certgen Secret envoy-oidc-hmac: %v", err)
	}
}

func conditionStatus(ctx context.Context, t *testing.T, r dynamic.ResourceInterface, name, typ string) string {
	t.Helper()
	u, err := r.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return fmt.Sprint(m["status"])
		}
	}
	return ""
}

func waitCondition(ctx context.Context, t *testing.T, r dynamic.ResourceInterface, name, typ, want string) {
	t.Helper()
	for {
		if got := conditionStatus(ctx, t, r, name, typ); got == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: condition %s never became %s (now %q)", name, typ, want, conditionStatus(context.Background(), t, r, name, typ))
		case <-time.After(pollEvery):
		}
	}
}

func waitDeployment(ctx context.Context, t *testing.T, tb *Testbed, ns, selector string) appsv1.Deployment {
	t.Helper()
	for {
		ds, err := tb.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil && len(ds.Items) == 1 {
			return ds.Items[0]
		}
		if err == nil && len(ds.Items) > 1 {
			t.Fatalf("%d Deployments in %s match %s, want 1", len(ds.Items), ns, selector)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no Deployment in %s matches %s (last error %v)", ns, selector, err)
		case <-time.After(pollEvery):
		}
	}
}

// adminGet reads an Envoy admin path through the node agent's DialPod (the admin listens on the
// pod's private localhost only).
func adminGet(ctx context.Context, tb *Testbed, ns, pod string, port int, path string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return tb.DialPod(ctx, ns, pod, port) },
	}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://admin"+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	}
	return string(b), err
}

// waitFunc polls f until it succeeds or ctx ends, returning f's last error then.
func waitFunc(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
