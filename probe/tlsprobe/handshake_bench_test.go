package tlsprobe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
)

// BenchmarkHandshakeEnvoy is issue 20's per-handshake target: client-side CPU of one TLS
// handshake with a real Envoy (ECDSA P-256 leaf under an intermediate, TLS 1.3), including one
// verification of the served chain against the bundle, as the audit does. It reports
// cpu-ms/handshake (this process's rusage, which does not include Envoy's) next to ns/op (wall).
//
//	certdrift  tlsprobe.Probe, then pki.Verify of the chain it returned
//	certdrift-cached  tlsprobe.Probe, then the served-chain check through a pki.ChainCache, as
//	           the audit runs it: a chain seen before (replicas serving one certificate, the
//	           next round) is judged from the cache, so this is the per-handshake cost in a fleet
//	bare       crypto/tls with RootCAs and ServerName: verification inside the handshake
//	blackbox   blackbox_exporter's tcp prober with tls: true (its own CA verification), one
//	           /probe per handshake; the CPU is the exporter process's, read from /proc. Set
//	           CERTDRIFT_BLACKBOX_BIN to its binary (see docs/benchmarks.md for the pinned version
//	           and how it was built); without it that case fails and says so.
//
// Run the three interleaved, several times, on a noisy machine:
//
//	go test -c -o /tmp/tlsprobe.test ./probe/tlsprobe
//	for i in 1 2 3 4 5; do /tmp/tlsprobe.test -test.run '^$' -test.bench HandshakeEnvoy -test.benchtime 2000x; done
func BenchmarkHandshakeEnvoy(b *testing.B) {
	root := certs.NewCA(b, certs.WithCommonName("bench root"))
	inter := root.Intermediate(b)
	leaf := inter.Leaf(b, certs.WithDNSNames("bench.example.com"))
	dir := b.TempDir()
	chainPEM := append(append([]byte{}, leaf.CertPEM...), inter.CertPEM...)
	certs.WriteFiles(b, dir, map[string][]byte{"tls.crt": chainPEM, "tls.key": leaf.KeyPEM, "ca.crt": root.CertPEM})
	e := envoytest.Start(b, envoytest.Config{Bootstrap: envoytest.Bootstrap(envoytest.Listener{
		Chains: []envoytest.Chain{{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}},
	})})
	addr := e.ListenerAddr(b, "https")
	roots := []*x509.Certificate{root.Cert}
	pool := x509.NewCertPool()
	pool.AddCert(root.Cert)
	const sni = "bench.example.com"

	b.Run("certdrift", func(b *testing.B) {
		cpuPerOp(b, func() error {
			r := Probe(context.Background(), Target{Address: addr, SNI: sni})
			if r.Err != nil {
				return r.Err
			}
			v := pki.Verify(r.Chain[0], r.Chain[1:], roots, time.Now(), x509.ExtKeyUsageAny)
			if !v.OK {
				return fmt.Errorf("chain does not verify: %v", v.Err)
			}
			return nil
		})
	})
	b.Run("certdrift-cached", func(b *testing.B) {
		cache := pki.NewChainCache(64)
		cpuPerOp(b, func() error {
			r := Probe(context.Background(), Target{Address: addr, SNI: sni})
			if r.Err != nil {
				return r.Err
			}
			if rep := cache.Check(r.Chain, roots); len(rep.Issues) > 0 {
				return fmt.Errorf("chain has issues: %v", rep.Issues)
			}
			return nil
		})
	})
	b.Run("bare", func(b *testing.B) {
		cfg := &tls.Config{ServerName: sni, RootCAs: pool}
		cpuPerOp(b, func() error {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
			if err != nil {
				return err
			}
			return c.Close()
		})
	})
	b.Run("blackbox", func(b *testing.B) {
		bin := os.Getenv("CERTDRIFT_BLACKBOX_BIN")
		if bin == "" {
			b.Fatal("set CERTDRIFT_BLACKBOX_BIN to a blackbox_exporter binary (docs/benchmarks.md, \"probe side\", says which version and how to build it)")
		}
		probeURL, pid := startBlackbox(b, bin, filepath.Join(dir, "ca.crt"), sni)
		target := probeURL + "&target=" + url.QueryEscape(addr)
		hc := &http.Client{Timeout: 10 * time.Second}
		before := procCPU(b, pid)
		start := time.Now()
		for i := 0; i < b.N; i++ {
			resp, err := hc.Get(target)
			if err != nil {
				b.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), "probe_success 1") {
				b.Fatalf("blackbox probe failed:\n%s", body)
			}
		}
		b.ReportMetric(float64(procCPU(b, pid)-before)/float64(time.Millisecond)/float64(b.N), "cpu-ms/handshake")
		b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N), "wall-ns/handshake")
	})
}

// cpuPerOp runs op b.N times and reports this process's CPU per op.
func cpuPerOp(b *testing.B, op func() error) {
	b.Helper()
	before := selfCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(selfCPU()-before)/float64(time.Millisecond)/float64(b.N), "cpu-ms/handshake")
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is another process's user+system CPU from /proc/<pid>/stat (clock ticks of 10 ms).
func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(fields[11], 10, 64) // utime is field 14 of the whole line
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// startBlackbox runs blackbox_exporter with one module (tcp, tls: true, our CA, the SNI) and
// returns the /probe URL up to its target parameter, and the process id.
func startBlackbox(b *testing.B, bin, caFile, sni string) (string, int) {
	b.Helper()
	dir := b.TempDir()
	cfg := filepath.Join(dir, "blackbox.yml")
	mod := fmt.Sprintf("modules:\n  tls:\n    prober: tcp\n    timeout: 5s\n    tcp:\n      tls: true\n      tls_config:\n        ca_file: %q\n        server_name: %q\n", caFile, sni)
	if err := os.WriteFile(cfg, []byte(mod), 0o600); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "--config.file", cfg, "--web.listen-address", listen, "--log.level", "error")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		b.Fatalf("start blackbox_exporter: %v", err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base := "http://" + listen
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("blackbox_exporter not ready at %s: %v", base, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return base + "/probe?module=tls", cmd.Process.Pid
}
