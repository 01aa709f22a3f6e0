// Command demo is certdrift's quickstart: it starts two real Envoys on loopback that serve one
// kubelet-style Secret volume — one through file-based SDS (reloads), one through a static
// tls_certificates context (never reloads) — rotates the Secret with the kubelet's atomic ..data
// swap, and runs the real `certdrift audit` before and after, so the reader sees a stale finding
// next to a converged Envoy. Everything lives in a temporary directory and is removed at the end.
//
//	go run ./test/demo [-certdrift bin/certdrift] [-keep]
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/test/atomicdir"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/envoytest"
	"github.com/certdrift/certdrift/test/standalone"
)

const host = "www.example.com"

func main() {
	bin := flag.String("certdrift", "bin/certdrift", "the certdrift binary to run")
	keep := flag.Bool("keep", false, "keep the temporary directory (certificates, configs, Envoy logs)")
	flag.Parse()
	r := standalone.New("demo")
	r.Keep = *keep
	os.Exit(r.Run(func() { run(r, os.Stdout, *bin) }, 2))
}

func run(r *standalone.Runner, out io.Writer, bin string) {
	if _, err := os.Stat(bin); err != nil {
		r.Fatalf("certdrift binary %s not found (build it with `make build`, or pass -certdrift): %v", bin, err)
	}
	ca := certs.NewCA(r, certs.WithCommonName("demo-ca"))
	v1 := ca.Leaf(r, certs.WithCommonName(host+" (v1)"), certs.WithDNSNames(host), certs.WithFreshKey())
	v2 := ca.Leaf(r, certs.WithCommonName(host+" (v2)"), certs.WithDNSNames(host), certs.WithFreshKey())

	// Everything at the top of the run's directory: the paths certdrift prints stay short.
	secret := filepath.Join(r.Dir(), "secret")
	project := func(l *certs.Leaf) {
		if err := atomicdir.Write(secret, map[string][]byte{"tls.crt": l.CertPEM, "tls.key": l.KeyPEM, "ca.crt": ca.CertPEM}); err != nil {
			r.Fatalf("project the Secret: %v", err)
		}
	}
	project(v1)

	sdsFile := filepath.Join(r.Dir(), "sds.json")
	if err := envoytest.WriteSDSFile(sdsFile, envoytest.TLSSecret("web_cert",
		filepath.Join(secret, "tls.crt"), filepath.Join(secret, "tls.key"), secret)); err != nil {
		r.Fatalf("%v", err)
	}
	fmt.Fprintln(out, "== Starting two real Envoys on loopback, both serving the Secret volume", secret)
	sds := envoytest.Start(r, envoytest.Config{Bootstrap: envoytest.FileSDSBootstrap(envoytest.SDSRef{Name: "web_cert", Path: sdsFile, WatchedDir: secret})})
	static := envoytest.Start(r, envoytest.Config{Bootstrap: envoytest.StaticTLSBootstrap(filepath.Join(secret, "tls.crt"), filepath.Join(secret, "tls.key"))})
	fmt.Fprintf(out, "   edge-sds     Envoy %s, file-based SDS watching the volume   admin %s\n", sds.Version(), sds.AdminURL)
	fmt.Fprintf(out, "   edge-static  Envoy %s, static tls_certificates             admin %s\n", static.Version(), static.AdminURL)

	cfg := filepath.Join(r.Dir(), "certdrift.yaml")
	body := fmt.Sprintf(`desired:
  - name: web
    dir: %s
envoys:
  - name: edge-sds
    admin: %s
    endpoints: [{address: %s, sni: [%s]}]
  - name: edge-static
    admin: %s
    endpoints: [{address: %s, sni: [%s]}]
policy:
  grace: 2s   # the kubelet takes up to a minute in a cluster; the demo rotates by hand
`, secret, sds.AdminURL, sds.ListenerAddr(r, "https"), host, static.AdminURL, static.ListenerAddr(r, "https"), host)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		r.Fatalf("%v", err)
	}
	fmt.Fprintf(out, "\n== certdrift config (%s)\n%s\n", cfg, indent(body))

	fmt.Fprintf(out, "== Before the rotation: certdrift audit --config %s\n", filepath.Base(cfg))
	audit(r, out, bin, cfg)

	fmt.Fprintln(out, "\n== Rotating the Secret: new certificate and key, atomic ..data swap as the kubelet does it")
	project(v2)
	rotated := time.Now()
	want := pki.Fingerprint(v2.Cert)
	for served(sds.ListenerAddr(r, "https")) != want {
		if time.Since(rotated) > 30*time.Second {
			r.Fatalf("edge-sds did not pick up the new certificate within 30s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Fprintf(out, "   edge-sds serves the new certificate after %s; waiting out the 2s grace period\n", time.Since(rotated).Round(time.Millisecond))
	time.Sleep(time.Until(rotated.Add(2500 * time.Millisecond)))

	fmt.Fprintf(out, "\n== After the rotation: certdrift audit --config %s\n", filepath.Base(cfg))
	audit(r, out, bin, cfg)
}

// audit runs the real certdrift binary and shows its output and exit code.
func audit(r *standalone.Runner, out io.Writer, bin, cfg string) {
	cmd := exec.Command(bin, "audit", "--config", cfg)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	fmt.Fprint(out, indent(string(stdout)))
	if s := stderr.String(); strings.Contains(s, "level=ERROR") || strings.Contains(s, "level=WARN") {
		fmt.Fprint(out, indent(s))
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		r.Fatalf("run certdrift: %v", err)
	}
	fmt.Fprintf(out, "   (exit code %d)\n", code)
}

func served(addr string) string {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, &tls.Config{ServerName: host, InsecureSkipVerify: true})
	if err != nil {
		return ""
	}
	defer conn.Close()
	return pki.Fingerprint(conn.ConnectionState().PeerCertificates[0])
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "   " + strings.ReplaceAll(s, "\n", "\n   ") + "\n"
}
