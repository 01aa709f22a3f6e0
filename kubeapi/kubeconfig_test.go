package kubeapi_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/certdrift/certdrift/kubeapi"
)

// TestKubeconfig: the file's current context or the one named, and a clear error naming what is
// wrong — a missing file, an unknown context, a file that is not a kubeconfig, and a FIFO or a
// device, which must fail at once instead of blocking client-go's read.
func TestKubeconfig(t *testing.T) {
	dir := t.TempDir()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["a"] = &clientcmdapi.Cluster{Server: "https://a.example:6443"}
	cfg.Clusters["b"] = &clientcmdapi.Cluster{Server: "https://b.example:6443"}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "not-a-real-token"}
	cfg.Contexts["ctx-a"] = &clientcmdapi.Context{Cluster: "a", AuthInfo: "u"}
	cfg.Contexts["ctx-b"] = &clientcmdapi.Context{Cluster: "b", AuthInfo: "u"}
	cfg.CurrentContext = "ctx-a"
	good := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, good); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("clusters: [1, 2"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		reason   string
		path     string
		context  string
		wantHost string
		wantErr  []string // each in the error
	}{
		"CurrentContext": {reason: "no context named: the file's current one", path: good, wantHost: "https://a.example:6443"},
		"NamedContext":   {reason: "a named context wins over the current one", path: good, context: "ctx-b", wantHost: "https://b.example:6443"},
		"UnknownContext": {reason: "a context the file lacks is an error naming it", path: good, context: "elsewhere", wantErr: []string{"elsewhere", good}},
		"Missing":        {reason: "a file that does not exist", path: filepath.Join(dir, "nope"), wantErr: []string{"kubeconfig", "nope"}},
		"Garbage":        {reason: "a file that is not YAML", path: garbage, wantErr: []string{"kubeconfig", garbage}},
		"FIFO":           {reason: "a FIFO would block client-go's os.ReadFile", path: fifo, wantErr: []string{"kubeconfig", "fifo"}},
		"Device":         {reason: "an endless device would exhaust memory", path: "/dev/zero", wantErr: []string{"kubeconfig", "/dev/zero"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			done := make(chan struct{})
			var host string
			var err error
			go func() {
				defer close(done)
				rc, e := kubeapi.Kubeconfig(tc.path, tc.context)
				if e == nil {
					host = rc.Host
				}
				err = e
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: Kubeconfig(%s) still blocked after 10s", tc.reason, tc.path)
			}
			if len(tc.wantErr) == 0 {
				if err != nil || host != tc.wantHost {
					t.Fatalf("%s: host %q, err %v; want host %q", tc.reason, host, err, tc.wantHost)
				}
				return
			}
			if err == nil {
				t.Fatalf("%s: no error (host %q)", tc.reason, host)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q lacks %q", tc.reason, err, w)
				}
			}
			if strings.Contains(err.Error(), "not-a-real-token") {
				t.Errorf("%s: the error shows the token: %v", tc.reason, err)
			}
		})
	}
}
