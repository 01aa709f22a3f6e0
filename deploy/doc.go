// Package deploy holds certdrift's installation manifests (kustomize/: a base and one overlay
// per RBAC profile) and their tests: each overlay is rendered with the testbed's kubectl, applied
// with --dry-run=server to a real kube-apiserver, then applied for real so that
// `kubectl auth can-i` can show what the ServiceAccount may and may not do; the Deployment's pod
// is admitted under the restricted Pod Security level; and the Dockerfile's build line is run
// to prove the binary is static.
package deploy
