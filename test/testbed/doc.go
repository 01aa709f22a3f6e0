// Package testbed runs a real Kubernetes control plane for tests: etcd, kube-apiserver and
// kube-controller-manager, built from their Go modules by scripts/build-kube.sh and started as
// child processes on loopback ports with a throwaway PKI.
//
// What runs is what a cluster runs: secure serving only, Node and RBAC authorization,
// service-account tokens signed by the testbed's key, and the controllers certdrift's Kubernetes
// mode depends on (ReplicaSet, Deployment, DaemonSet, StatefulSet, disruption, garbage
// collector, namespace, service accounts). There is no scheduler and no kubelet: pods stay
// Pending until a node agent binds and runs them.
//
// Tests call StartT once (or Start from TestMain) and use Client, Config or KubeconfigPath.
// The binaries are looked up in $CERTDRIFT_KUBE_BIN_DIR, else in .cache/kube/<KubeVersion>/ at
// the repository root; when they are missing, Start fails with the command that builds them.
package testbed
