// Package scale measures the Kubernetes inventory against issue 4's benchmark: an API server
// holding 10,000 kubernetes.io/tls Secrets (unique ECDSA P-256 leaves, one shared ca.crt) in 100
// namespaces plus 1,000 unrelated 20 KB Opaque Secrets. Populate fills a cluster quickly (one CA,
// leaves signed and Secrets created by parallel workers over protobuf); Floor is the bare loop
// the issue names as the floor (paged protobuf list, 1,000 per page, type field selector, parse
// every certificate); Measure runs a child process and reads its wall time, peak RSS and CPU from
// the kernel (wait4 rusage, taken by a small launcher so that the figures are the child's own),
// so certdrift and the floor are measured the same way.
//
// CERTDRIFT_SCALE picks the data set (SpecFor), CERTDRIFT_SCALE_RUNS the runs per measurement,
// and CERTDRIFT_SCALE_BINS=before=PATH,after=PATH compares built binaries on one populated
// testbed, interleaved run by run (TestInventoryScale, TestServeRounds), as docs/benchmarks.md
// records before/after pairs.
package scale

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Spec sizes a data set.
type Spec struct {
	TLSSecrets    int // kubernetes.io/tls Secrets, spread over Namespaces
	Namespaces    int
	OpaqueSecrets int // unrelated Opaque Secrets of OpaqueBytes each
	OpaqueBytes   int
	// NamespacePrefix names the namespaces <prefix>-000…; default "scale".
	NamespacePrefix string
	// Workers create Secrets concurrently; default 32.
	Workers int
}

// Full is issue 4's data set; Small is what `go test` uses by default.
var (
	Full  = Spec{TLSSecrets: 10000, Namespaces: 100, OpaqueSecrets: 1000, OpaqueBytes: 20 << 10}
	Small = Spec{TLSSecrets: 300, Namespaces: 10, OpaqueSecrets: 30, OpaqueBytes: 20 << 10}
)

func (s Spec) withDefaults() Spec {
	if s.NamespacePrefix == "" {
		s.NamespacePrefix = "scale"
	}
	if s.Workers <= 0 {
		s.Workers = 32
	}
	if s.Namespaces <= 0 {
		s.Namespaces = 1
	}
	return s
}

// Namespace is the i-th namespace of the data set.
func (s Spec) Namespace(i int) string {
	s = s.withDefaults()
	return fmt.Sprintf("%s-%03d", s.NamespacePrefix, i%s.Namespaces)
}

type job struct {
	i      int // index among the Secrets of its kind
	opaque bool
}

func opaqueOrTLS(i, tls int) job {
	if i >= tls {
		return job{i: i - tls, opaque: true}
	}
	return job{i: i}
}

// PopulateStats says what Populate did.
type PopulateStats struct {
	Created  int
	Took     time.Duration
	CAPEM    []byte // the shared ca.crt, for checks
	LeafTime time.Duration
}

// Populate creates the namespaces and Secrets of spec through cfg (as an admin). It signs every
// leaf with one ECDSA CA in the workers that create the Secrets, so signing overlaps the API
// calls; nothing it creates carries a real identity.
func Populate(ctx context.Context, cfg *rest.Config, spec Spec) (PopulateStats, error) {
	spec = spec.withDefaults()
	start := time.Now()
	c := rest.CopyConfig(cfg)
	c.ContentType = "application/vnd.kubernetes.protobuf"
	c.QPS, c.Burst = 5000, 5000
	client, err := kubernetes.NewForConfig(c)
	if err != nil {
		return PopulateStats{}, fmt.Errorf("populate client for %s: %w", cfg.Host, err)
	}
	for i := range spec.Namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: spec.Namespace(i)}}
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return PopulateStats{}, fmt.Errorf("create namespace %s: %w", ns.Name, err)
		}
	}
	ca, err := newCA()
	if err != nil {
		return PopulateStats{}, err
	}
	jobs := make(chan job, spec.Workers*2)
	var (
		wg       sync.WaitGroup
		created  atomic.Int64
		leafNS   atomic.Int64
		firstErr error
		errOnce  sync.Once
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) { errOnce.Do(func() { firstErr = err; cancel() }) }
	blob := make([]byte, spec.OpaqueBytes)
	for i := range blob {
		blob[i] = byte(i * 31)
	}
	for range spec.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				var s *corev1.Secret
				if j.opaque {
					s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: spec.Namespace(j.i), Name: fmt.Sprintf("blob-%05d", j.i)},
						Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"blob": blob}}
				} else {
					t0 := time.Now()
					certPEM, keyPEM, err := ca.leaf(fmt.Sprintf("svc-%05d.%s.scale.example", j.i, spec.Namespace(j.i)))
					leafNS.Add(int64(time.Since(t0)))
					if err != nil {
						fail(err)
						continue
					}
					s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: spec.Namespace(j.i), Name: fmt.Sprintf("tls-%05d", j.i)},
						Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": ca.certPEM}}
				}
				_, err := client.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{FieldManager: "certdrift-scale"})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					fail(fmt.Errorf("create secret %s/%s: %w", s.Namespace, s.Name, err))
					continue
				}
				created.Add(1)
			}
		}()
	}
feed:
	for i := range spec.TLSSecrets + spec.OpaqueSecrets {
		select {
		case jobs <- opaqueOrTLS(i, spec.TLSSecrets):
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return PopulateStats{}, firstErr
	}
	return PopulateStats{Created: int(created.Load()), Took: time.Since(start), CAPEM: ca.certPEM, LeafTime: time.Duration(leafNS.Load())}, nil
}

type signer struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	serial  atomic.Int64
}

func newCA() (*signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("scale CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "certdrift scale CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(365 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("scale CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("scale CA: %w", err)
	}
	s := &signer{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	s.serial.Store(1)
	return s, nil
}

// leaf is a fresh P-256 key and a certificate for dnsName signed by the CA.
func (s *signer) leaf(dnsName string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("leaf key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(s.serial.Add(1)), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(200 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.cert, &key.PublicKey, s.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign leaf %s: %w", dnsName, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("leaf key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// FloorResult is what the bare loop saw.
type FloorResult struct {
	Secrets, Certificates, Pages int
}

// Floor is the reference loop: list kubernetes.io/tls Secrets cluster-wide, 1,000 per
// page, over protobuf, with the type field selector, and parse every certificate of tls.crt. It
// keeps nothing, so it is the cost of getting the data and parsing it, and no more.
func Floor(ctx context.Context, cfg *rest.Config, pageSize int64) (FloorResult, error) {
	c := rest.CopyConfig(cfg)
	c.ContentType = "application/vnd.kubernetes.protobuf"
	c.AcceptContentTypes = c.ContentType
	client, err := kubernetes.NewForConfig(c)
	if err != nil {
		return FloorResult{}, fmt.Errorf("floor client for %s: %w", cfg.Host, err)
	}
	var r FloorResult
	opts := metav1.ListOptions{Limit: pageSize, FieldSelector: fields.OneTermEqualSelector("type", string(corev1.SecretTypeTLS)).String()}
	for {
		list, err := client.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return r, fmt.Errorf("list secrets page %d: %w", r.Pages+1, err)
		}
		r.Pages++
		for i := range list.Items {
			r.Secrets++
			rest := list.Items[i].Data[corev1.TLSCertKey]
			for {
				var b *pem.Block
				b, rest = pem.Decode(rest)
				if b == nil {
					break
				}
				if b.Type != "CERTIFICATE" {
					continue
				}
				if _, err := x509.ParseCertificate(b.Bytes); err != nil {
					return r, fmt.Errorf("secret %s/%s: %w", list.Items[i].Namespace, list.Items[i].Name, err)
				}
				r.Certificates++
			}
		}
		if list.Continue == "" {
			return r, nil
		}
		opts.Continue = list.Continue
	}
}

// Usage is what one child process cost.
type Usage struct {
	Wall    time.Duration
	MaxRSS  int64 // bytes
	UserCPU time.Duration
	SysCPU  time.Duration
}

// CPU is user plus system time.
func (u Usage) CPU() time.Duration { return u.UserCPU + u.SysCPU }

// Measure runs cmd to completion and returns its wall time and, from the kernel's accounting of
// that one child, its peak RSS and CPU time. An exit status other than those in okCodes is an
// error (with whatever the child wrote to stderr if cmd.Stderr was left nil).
//
// The child is started through a small launcher (internal/spawn) that reads its rusage: a child
// started by this process directly would be charged with this process's peak RSS (vfork, then
// execve records the shared address space's high-water mark), which made every figure at least
// the test binary's size — 277–360 MB for a 75 MB certdrift next to the fleet's node agents.
// cmd's path, arguments, environment, directory and streams are kept; a Cancel from
// exec.CommandContext kills the launcher, which takes the child with it.
func Measure(cmd *exec.Cmd, okCodes ...int) (Usage, error) {
	if runtime.GOOS != "linux" {
		return Usage{}, errors.New("scale.Measure reads rusage as Linux reports it (ru_maxrss in KiB)")
	}
	if cmd.Err != nil {
		return Usage{}, cmd.Err
	}
	launcher, err := spawnBinary()
	if err != nil {
		return Usage{}, err
	}
	dir, err := os.MkdirTemp("", "scale-measure-")
	if err != nil {
		return Usage{}, err
	}
	defer os.RemoveAll(dir)
	ruFile := filepath.Join(dir, "rusage.json")
	prog := cmd.Path
	cmd.Args = append([]string{launcher, "-rusage", ruFile, "--", prog}, cmd.Args[1:]...)
	cmd.Path = launcher
	err = cmd.Run()
	if cmd.ProcessState == nil {
		return Usage{}, fmt.Errorf("run %s: %w", prog, err)
	}
	var su struct {
		WallNanos   int64 `json:"wall_nanos"`
		MaxRSSBytes int64 `json:"max_rss_bytes"`
		UserNanos   int64 `json:"user_nanos"`
		SysNanos    int64 `json:"sys_nanos"`
	}
	b, rerr := os.ReadFile(ruFile)
	if rerr == nil {
		rerr = json.Unmarshal(b, &su)
	}
	if rerr != nil {
		return Usage{}, fmt.Errorf("run %s: no usage from the launcher (%v): %w", prog, rerr, err)
	}
	u := Usage{Wall: time.Duration(su.WallNanos), MaxRSS: su.MaxRSSBytes,
		UserCPU: time.Duration(su.UserNanos), SysCPU: time.Duration(su.SysNanos)}
	if err != nil {
		code := cmd.ProcessState.ExitCode()
		for _, ok := range okCodes {
			if code == ok {
				return u, nil
			}
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return u, fmt.Errorf("run %s: %w: %s", prog, err, ee.Stderr)
		}
		return u, fmt.Errorf("run %s: %w", prog, err)
	}
	return u, nil
}

var spawnOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "scale-spawn-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "spawn")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/certdrift/certdrift/test/scale/internal/spawn")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the measurement launcher test/scale/internal/spawn (needs the go tool on PATH): %v\n%s", err, out)
	}
	return bin, nil
})

// spawnBinary builds internal/spawn once per process (it stays in the temporary directory; the
// go build cache makes later builds cheap).
func spawnBinary() (string, error) { return spawnOnce() }
