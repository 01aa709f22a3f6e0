// Package deploy holds certdrift's installation manifests and their tests: kustomize/ (a base
// and one overlay per RBAC profile) and helm/certdrift (the Helm chart, tested in helm_test.go
// with the helm CLI `make helm` builds and the prometheus-operator CRDs kept in crds/). Each
// overlay and each chart render is applied with --dry-run=server to a real kube-apiserver, then
// installed for real so that `kubectl auth can-i` can show what the ServiceAccount may and may
// not do; the Deployment's pod is admitted under the restricted Pod Security level; and the
// optional Dockerfile's build line is run to prove the binary is static. The release image is
// built without Docker by `make image` and checked in test/release.
package deploy
