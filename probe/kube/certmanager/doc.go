// Package certmanager reads cert-manager's Certificates and CertificateRequests
// (cert-manager.io/v1) as small typed projections (probe/kube's CMCertificate and CMRequest):
// the fields the audit joins and judges, never a CSR, a certificate's PEM or anything of a
// Secret. It uses the dynamic client and unstructured objects, not cert-manager's Go module, whose
// dependency tree is larger than certdrift's whole binary. An API server that does not serve the
// CRDs answers 404: cert-manager is then absent, which is not an error.
//
// Once Start is called it lists once and watches (watch.go): a round reads the projections kept in
// memory, an unchanged round costs a copy of them, and a change calls Options.OnChange so that
// `serve` judges it at once. Before Start, Read lists (List), as every round once did; a one-shot audit
// (gather.KubeOnce) never starts the watch.
package certmanager
