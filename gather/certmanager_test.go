package gather

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/ref"
)

// TestWithCertManagerSecrets: each Certificate's Secret is added once, after the refs the pods
// name; a Certificate without a valid Secret name adds nothing.
func TestWithCertManagerSecrets(t *testing.T) {
	mounted := ref.Source{Kind: ref.Secret, Namespace: "shop", Name: "web-tls"}
	cm := kube.CertManager{Read: true, Present: true, Certificates: []kube.CMCertificate{
		{Namespace: "shop", Name: "web", SecretName: "web-tls"},
		{Namespace: "shop", Name: "api", SecretName: "api-tls"},
		{Namespace: "shop", Name: "api-again", SecretName: "api-tls"},
		{Namespace: "shop", Name: "unnamed"},
		{Namespace: "shop", Name: "bad", SecretName: "Not_A_Name"},
	}}
	got := withCertManagerSecrets([]ref.Source{mounted}, cm)
	want := []ref.Source{mounted, {Kind: ref.Secret, Namespace: "shop", Name: "api-tls"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := withCertManagerSecrets(nil, kube.CertManager{Read: true}); len(got) != 0 {
		t.Errorf("cert-manager absent: %v, want nothing", got)
	}
}
