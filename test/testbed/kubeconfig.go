package testbed

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes a kubeconfig (mode 0600, it embeds a private key) for one
// client-certificate user of the testbed's API server.
func writeKubeconfig(path, server string, caPEM []byte, user string, kp keyPair) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testbed"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.certPEM, ClientKeyData: kp.keyPEM}
	cfg.Contexts["testbed"] = &clientcmdapi.Context{Cluster: "testbed", AuthInfo: user}
	cfg.CurrentContext = "testbed"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s for %q: %w", path, user, err)
	}
	return nil
}

// restConfig is the client-go equivalent of writeKubeconfig. The rate limits are raised because
// tests create objects in bursts and the default 5 QPS turns seconds into minutes.
func restConfig(server string, caPEM []byte, kp keyPair) *rest.Config {
	return &rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   caPEM,
			CertData: kp.certPEM,
			KeyData:  kp.keyPEM,
		},
		QPS:   100,
		Burst: 200,
	}
}
