package gather

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/certmanager"
	"github.com/certdrift/certdrift/test/testbed"
)

// TestSessionCertManagerChange: a Session watches cert-manager (the serve wiring): a Certificate
// created after the start calls OnCertManagerChange and is in the next round's inputs; the
// control, with --no-cert-manager, reads nothing and calls nothing.
func TestSessionCertManagerChange(t *testing.T) {
	tb := testbed.StartT(t, testbed.Options{Nodes: -1}) // fails with how to build the binaries when absent
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := tb.InstallCertManagerCRDs(ctx, ""); err != nil {
		t.Fatal(err)
	}
	const ns = "default"
	changes := make(chan string, 16)
	start := func(off bool) *Session {
		s, err := Start(ctx, tb.Config, config.DefaultPolicy, KubeOptions{Namespaces: []string{ns}, NoCertManager: off,
			OnCertManagerChange: func(op kube.ChangeOp, kind, ns, name string) {
				changes <- fmt.Sprintf("%v %s %s/%s", off, kind, ns, name)
			}, Options: Options{Concurrency: 2}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	on, off := start(false), start(true)
	if cm := on.Gather(ctx, Fleet).CertManager; !cm.Present || cm.Err != nil || len(cm.Certificates) != 0 {
		t.Fatalf("before the Certificate: %+v, want cert-manager present, nothing in it", cm)
	}
	dc, err := dynamic.NewForConfig(tb.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Resource(certmanager.Certificates).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": map[string]any{"name": "web", "namespace": ns},
		"spec": map[string]any{"secretName": "web-tls", "issuerRef": map[string]any{"name": "ca"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Certificate: %v", err)
	}
	select {
	case got := <-changes:
		if want := "false Certificate " + ns + "/web"; got != want {
			t.Errorf("change: %q, want %q", got, want)
		}
	case <-ctx.Done():
		t.Fatal("no cert-manager change reported")
	}
	if cm := on.Gather(ctx, Fleet).CertManager; len(cm.Certificates) != 1 || cm.Certificates[0].SecretName != "web-tls" {
		t.Errorf("round after the change: %+v, want Certificate web", cm)
	}
	if cm := off.Gather(ctx, Fleet).CertManager; cm.Read || len(cm.Certificates) != 0 {
		t.Errorf("control, --no-cert-manager: %+v, want nothing read", cm)
	}
	select {
	case got := <-changes:
		t.Errorf("another change reported: %q", got)
	default:
	}
}
