package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CertManagerVersion is the cert-manager module version scripts/build-cert-manager.sh builds.
const CertManagerVersion = "v1.21.2"

// CertManagerDirEnv overrides where cert-manager-controller and crds.yaml are found.
const CertManagerDirEnv = "CERTDRIFT_CERT_MANAGER_DIR"

// CertManagerNamespace is cert-manager's own namespace: the --cluster-resource-namespace, where a
// ClusterIssuer's CA Secret lives.
const CertManagerNamespace = "cert-manager"

const certManagerHint = "build it once with `make cert-manager` (scripts/build-cert-manager.sh; later runs reuse " +
	".cache/cert-manager), or point " + CertManagerDirEnv + " at a directory holding cert-manager-controller and crds.yaml"

// CertManagerCRDs are the CRDs InstallCertManagerCRDs waits for.
var CertManagerCRDs = []string{"certificates.cert-manager.io", "certificaterequests.cert-manager.io",
	"issuers.cert-manager.io", "clusterissuers.cert-manager.io", "orders.acme.cert-manager.io", "challenges.acme.cert-manager.io"}

// findCertManagerDir returns the directory holding cert-manager-controller and crds.yaml; with
// crdsOnly, only crds.yaml is required.
func findCertManagerDir(explicit string, crdsOnly bool) (string, error) {
	dir := explicit
	if dir == "" {
		dir = os.Getenv(CertManagerDirEnv)
	}
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return "", fmt.Errorf("locate cert-manager: %w; %s", err, certManagerHint)
		}
		dir = filepath.Join(root, ".cache", "cert-manager", CertManagerVersion)
	}
	need := []string{"crds.yaml"}
	if !crdsOnly {
		need = append(need, "cert-manager-controller")
	}
	for _, name := range need {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("cert-manager %s: %w; %s", CertManagerVersion, err, certManagerHint)
		}
		if name == "cert-manager-controller" && fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s is not executable; %s", filepath.Join(dir, name), certManagerHint)
		}
	}
	return dir, nil
}

// InstallCertManagerCRDs applies cert-manager's CRDs, the module's deploy/crds/*.yaml
// concatenated into crds.yaml by scripts/build-cert-manager.sh (1 MB, kept in the cache rather
// than the repository), and waits until each is Established. Server-side apply, as for Envoy
// Gateway's: the Certificate CRD is near the 256 KiB a client-side last-applied annotation allows.
func (tb *Testbed) InstallCertManagerCRDs(ctx context.Context, dir string) error {
	dir, err := findCertManagerDir(dir, true)
	if err != nil {
		return err
	}
	crds := filepath.Join(dir, "crds.yaml")
	if out, err := tb.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", crds); err != nil {
		return fmt.Errorf("install CRDs from %s: %w\n%s", crds, err, indent(lastLines(string(out), 10)))
	}
	args := append([]string{"wait", "--for=condition=Established", "--timeout=60s"}, prefixed("crd/", CertManagerCRDs)...)
	if out, err := tb.Kubectl(ctx, args...); err != nil {
		return fmt.Errorf("wait for the CRDs of %s: %w\n%s", crds, err, indent(lastLines(string(out), 10)))
	}
	return nil
}

func prefixed(p string, xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = p + x
	}
	return out
}

// CertManagerOptions configure StartCertManager. The zero value is ready to use.
type CertManagerOptions struct {
	// Dir holds cert-manager-controller and crds.yaml. Default: $CERTDRIFT_CERT_MANAGER_DIR, else
	// .cache/cert-manager/<CertManagerVersion>/ at the repository root.
	Dir string
	// ReadyTimeout bounds CRD installation and the controller's start (default 1 minute).
	ReadyTimeout time.Duration
	// Disable names control loops not to run, e.g. "certificaterequests-approver" for a test that
	// approves or denies CertificateRequests itself, as an approver policy would.
	Disable []string
}

// CertManager is cert-manager's real CA issuing controllers (the loops of its module's
// pkg/controller packages that a CA issuer needs, see scripts/build-cert-manager.sh) running
// against the testbed as a child process of the test.
type CertManager struct {
	// LogPath is the controller's stdout and stderr.
	LogPath string
	// Version is what `cert-manager-controller --version` printed.
	Version string

	proc     *process
	stopOnce sync.Once
	stopErr  error
}

// StartCertManager installs the CRDs, creates CertManagerNamespace and starts the controllers
// with the testbed's admin kubeconfig (not the chart's ServiceAccount and RBAC). What is not
// there: the webhook (no defaulting or validation of cert-manager objects: write them complete),
// cainjector, ACME, Vault and Venafi issuers, ingress-shim and gateway-shim. Leader election is
// off (one process).
func (tb *Testbed) StartCertManager(ctx context.Context, opts CertManagerOptions) (*CertManager, error) {
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, opts.ReadyTimeout)
	defer cancel()
	dir, err := findCertManagerDir(opts.Dir, false)
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "cert-manager-controller")
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	cm := &CertManager{Version: strings.TrimSpace(string(out))}
	if err != nil || cm.Version != "cert-manager-controller "+CertManagerVersion {
		return nil, fmt.Errorf("%s --version: %q (%v), want %s; %s", bin, cm.Version, err, CertManagerVersion, certManagerHint)
	}
	if err := tb.InstallCertManagerCRDs(ctx, dir); err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: CertManagerNamespace}}
	if _, err := tb.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %s: %w", CertManagerNamespace, err)
	}
	args := []string{"--kubeconfig", tb.KubeconfigPath, "--cluster-resource-namespace", CertManagerNamespace, "-v", "2"}
	if len(opts.Disable) > 0 {
		args = append(args, "--disable", strings.Join(opts.Disable, ","))
	}
	cm.proc, err = startProcess("cert-manager", bin, args, filepath.Join(tb.Dir, "cert-manager"))
	if err != nil {
		return nil, err
	}
	cm.LogPath = cm.proc.logPath
	// The wrapper prints "running [...]" once every loop is constructed and the informers are
	// started; each loop then waits for its caches itself.
	for {
		if err := cm.proc.exitErr(); err != nil {
			return nil, cm.proc.failure("cert-manager-controller", err)
		}
		if data, err := os.ReadFile(cm.LogPath); err == nil && strings.Contains(string(data), "cert-manager-controller "+CertManagerVersion+": running") {
			return cm, nil
		}
		select {
		case <-ctx.Done():
			cm.Stop()
			return nil, cm.proc.failure("cert-manager-controller not running", ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}

// Stop stops the controllers (SIGTERM, then SIGKILL after the grace period).
func (cm *CertManager) Stop() error {
	cm.stopOnce.Do(func() {
		if cm.proc != nil {
			cm.stopErr = cm.proc.stop(stopGrace)
		}
	})
	return cm.stopErr
}

// Log returns the controller's log (for a failing test's output; it holds no key material:
// cert-manager logs object names and conditions).
func (cm *CertManager) Log() string {
	data, err := os.ReadFile(cm.LogPath)
	if err != nil {
		return errors.Join(err).Error()
	}
	return string(data)
}
