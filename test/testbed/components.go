package testbed

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
)

// controllers are the kube-controller-manager controllers the testbed runs: the workload and
// disruption controllers certdrift's repair path relies on, what keeps service accounts and
// their tokens working (pods are rejected until their namespace's "default" ServiceAccount
// exists), the kube-root-ca.crt publisher that projected service-account volumes read, and the
// ClusterRole aggregation that fills in the admin/edit/view roles RBAC tests bind to.
var controllers = []string{
	"replicaset-controller",
	"deployment-controller",
	"daemonset-controller",
	"statefulset-controller",
	"disruption-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-token-controller",
	"serviceaccount-controller",
	"root-ca-certificate-publisher-controller",
	"clusterrole-aggregation-controller",
}

// layout names every file and port of one testbed; the components' flags are derived from it.
type layout struct {
	dir                                         string
	etcdClientPort, etcdPeerPort                int
	apiserverPort, controllerManagerPort        int
	serviceClusterIPRange, serviceAccountIssuer string
}

func (l layout) pki(name string) string { return filepath.Join(l.dir, "pki", name) }
func (l layout) logDir() string         { return filepath.Join(l.dir, "logs") }
func (l layout) etcdURL() string        { return "http://127.0.0.1:" + strconv.Itoa(l.etcdClientPort) }
func (l layout) apiserverURL() string   { return "https://127.0.0.1:" + strconv.Itoa(l.apiserverPort) }

func (l layout) etcdArgs() []string {
	peer := "http://127.0.0.1:" + strconv.Itoa(l.etcdPeerPort)
	return []string{
		"--name=testbed",
		"--data-dir=" + filepath.Join(l.dir, "etcd"),
		"--listen-client-urls=" + l.etcdURL(),
		"--advertise-client-urls=" + l.etcdURL(),
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=testbed=" + peer,
		// The data dies with the testbed: fsync buys nothing and costs seconds on a busy disk.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
}

func (l layout) apiserverArgs() []string {
	return []string{
		"--etcd-servers=" + l.etcdURL(),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(l.apiserverPort),
		"--cert-dir=" + filepath.Join(l.dir, "apiserver"),
		"--tls-cert-file=" + l.pki("apiserver.crt"),
		"--tls-private-key-file=" + l.pki("apiserver.key"),
		"--client-ca-file=" + l.pki("ca.crt"),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=" + l.serviceAccountIssuer,
		"--service-account-key-file=" + l.pki("sa.pub"),
		"--service-account-signing-key-file=" + l.pki("sa.key"),
		"--service-cluster-ip-range=" + l.serviceClusterIPRange,
		"--allow-privileged=true",
		// The node agent serves the kubelet API with a certificate from the same CA and is
		// reached at the InternalIP it registers (a loopback address).
		"--kubelet-client-certificate=" + l.pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + l.pki("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority=" + l.pki("ca.crt"),
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		// The reconciler would publish 127.0.0.1 as the "kubernetes" Service endpoint, which
		// Endpoints validation rejects as loopback; nothing in the testbed reaches the API server
		// through that Service.
		"--endpoint-reconciler-type=none",
		// A front-proxy CA, as kubeadm sets up: without it every delegating component (the
		// controller manager here) logs an error per second about the missing request-header CA.
		"--requestheader-client-ca-file=" + l.pki("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + l.pki("front-proxy-client.crt"),
		"--proxy-client-key-file=" + l.pki("front-proxy-client.key"),
		"--profiling=false",
	}
}

func (l layout) controllerManagerArgs() []string {
	kubeconfig := filepath.Join(l.dir, "controller-manager.kubeconfig")
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(l.controllerManagerPort),
		"--tls-cert-file=" + l.pki("controller-manager.crt"),
		"--tls-private-key-file=" + l.pki("controller-manager.key"),
		"--client-ca-file=" + l.pki("ca.crt"),
		"--controllers=" + strings.Join(controllers, ","),
		"--leader-elect=false",
		// Each controller acts as its own service account, as in kubeadm clusters, so RBAC and
		// token issuance are exercised by the control plane itself.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + l.pki("sa.key"),
		"--root-ca-file=" + l.pki("ca.crt"),
		"--profiling=false",
	}
}

// servingNames are the addresses the API server certificate covers: loopback, where clients
// reach it, and the first service IP, the in-cluster "kubernetes" Service.
func (l layout) servingNames() ([]string, error) {
	first, err := firstServiceIP(l.serviceClusterIPRange)
	if err != nil {
		return nil, err
	}
	return []string{"127.0.0.1", first, "localhost", "kubernetes", "kubernetes.default",
		"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}, nil
}

func firstServiceIP(cidr string) (string, error) {
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return "", fmt.Errorf("service cluster IP range %q: %w", cidr, err)
	}
	if !prefix.Addr().Is4() || prefix.Bits() > 30 {
		return "", fmt.Errorf("service cluster IP range %q: want an IPv4 range of at least 4 addresses", cidr)
	}
	return prefix.Masked().Addr().Next().String(), nil
}
