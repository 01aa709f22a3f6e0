package gather

import (
	"context"
	"slices"

	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/certmanager"
	"github.com/certdrift/certdrift/ref"
)

// newCertManager builds the cert-manager reader a Session uses, nil when turned off.
func newCertManager(rc *rest.Config, opt KubeOptions) (*certmanager.Reader, error) {
	if opt.NoCertManager {
		return nil, nil
	}
	return certmanager.New(rc, certmanager.Options{Namespaces: opt.Namespaces, QPS: opt.QPS, Burst: opt.Burst,
		SyncTimeout: opt.SyncTimeout, Logger: opt.Log, OnChange: opt.OnCertManagerChange})
}

// readCertManager reads cert-manager's objects for one round (from the reader's watch, which Start
// starts; KubeOnce's one round lists), narrowed to sc's namespace. Absent CRDs give Present false
// and no error (audit judges nothing of cert-manager then).
func (s *Session) readCertManager(ctx context.Context, sc Scope) kube.CertManager {
	if s.cm == nil {
		return kube.CertManager{}
	}
	cm := s.cm.Read(ctx)
	if cm.Err != nil {
		s.opt.Log.Warn("cert-manager", "err", cm.Err)
	}
	s.opt.Log.Debug("cert-manager read", "present", cm.Present, "certificates", len(cm.Certificates), "requests", len(cm.Requests))
	ns := sc.Namespace
	if e, ok := ref.ParseEnvoy(sc.Envoy); ns == "" && ok {
		ns = e.Namespace
	}
	if ns != "" {
		cm.Certificates = slices.DeleteFunc(cm.Certificates, func(c kube.CMCertificate) bool { return c.Namespace != ns })
		cm.Requests = slices.DeleteFunc(cm.Requests, func(r kube.CMRequest) bool { return r.Namespace != ns })
	}
	return cm
}

// withCertManagerSecrets adds the Certificates' Secrets to refs (each once): a Secret the
// inventory does not watch is then read by name, so that the Certificate can be judged against it.
func withCertManagerSecrets(refs []ref.Source, cm kube.CertManager) []ref.Source {
	for _, c := range cm.Certificates {
		if c.SecretName == "" || !kube.ValidRef(c.Namespace, c.SecretName) {
			continue
		}
		r := ref.Source{Kind: ref.Secret, Namespace: c.Namespace, Name: c.SecretName}
		if !slices.Contains(refs, r) {
			refs = append(refs, r)
		}
	}
	return refs
}
