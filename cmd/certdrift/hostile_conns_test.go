package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/certdrift/certdrift/test/certs"
)

// TestIdleConnectionFlood: 6,000 idle connections (half silent, half keep-alive after one
// request) opened against serve's metrics and probe ports while it runs with 1,024 file
// descriptors: an authenticated scrape and /-/ready still succeed, and accept never runs out of
// descriptors. Before --web.max-connections and the idle timeouts, such a flood held every
// descriptor and scrapes timed out.
func TestIdleConnectionFlood(t *testing.T) {
	const (
		fdLimit  = 1024
		maxConns = 300 // per port: two ports, 600 of the 1,024 descriptors at most
		flood    = 6000
	)
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatal("prlimit (util-linux) is needed to run certdrift with a lowered descriptor limit: apt-get install util-linux")
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < flood+500 {
		t.Fatalf("this test opens %d connections itself: raise its descriptor limit (ulimit -n %d; now %d)", flood, flood+500, rl.Cur)
	}

	dir := t.TempDir()
	ca := certs.NewCA(t, certs.WithCommonName("flood-ca"))
	leaf := ca.Leaf(t, certs.WithCommonName("web"), certs.WithDNSNames("www.example.com"))
	certs.WriteFiles(t, filepath.Join(dir, "web"), map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM})
	cfg := writeConfig(t, fmt.Sprintf("desired:\n  - name: web\n    dir: %s\n", filepath.Join(dir, "web")))
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webCfg := filepath.Join(dir, "web.yaml")
	if err := os.WriteFile(webCfg, []byte(fmt.Sprintf("basic_auth_users:\n  prom: %s\n", hash)), 0o600); err != nil {
		t.Fatal(err)
	}

	p := startServe(t, []string{prlimit, fmt.Sprintf("--nofile=%d:%d", fdLimit, fdLimit), "--"},
		"--config", cfg, "--web.config.file", webCfg, "--web.listen-address", "127.0.0.1:0",
		"--web.probe-address", "127.0.0.1:0", "--web.max-connections", fmt.Sprint(maxConns), "--interval", "1s")
	p.listening(t, 2)
	eventually(t, "serve to be ready", 20*time.Second, func() (bool, string) {
		code, body := get(t, "GET", p.probes+"/-/ready")
		return code == http.StatusOK, body
	})

	// The flood: every connection stays open on this side until the test ends.
	var (
		mu     sync.Mutex
		conns  []net.Conn
		failed atomic.Int64
		wg     sync.WaitGroup
	)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	start := time.Now()
	work := make(chan int)
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				addr := strings.TrimPrefix(p.metrics, "http://")
				if i%2 == 1 {
					addr = strings.TrimPrefix(p.probes, "http://")
				}
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					failed.Add(1)
					continue
				}
				if i%4 < 2 { // one keep-alive request, never read, then silence
					_, _ = io.WriteString(c, "GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < flood; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d flood connections could not be opened", n, flood)
	}
	t.Logf("opened %d idle connections in %s", len(conns), time.Since(start).Round(time.Millisecond))

	// With the flood held open: an authenticated scrape, and readiness on both ports.
	client := &http.Client{Timeout: 10 * time.Second}
	scrapeStart := time.Now()
	req, _ := http.NewRequest("GET", p.metrics+"/metrics", nil)
	req.SetBasicAuth("prom", "s3cret")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("authenticated scrape during the flood: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "certdrift_build_info") {
		t.Errorf("authenticated scrape during the flood: %d, certdrift_build_info present: %v", resp.StatusCode, strings.Contains(string(body), "certdrift_build_info"))
	}
	scrape := time.Since(scrapeStart)
	for _, u := range []string{p.probes + "/-/ready", p.metrics + "/-/ready"} {
		req, _ := http.NewRequest("GET", u, nil)
		req.SetBasicAuth("prom", "s3cret")
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("%s during the flood: %v", u, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s during the flood: %d, want 200", u, resp.StatusCode)
		}
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
	t.Logf("scrape with %d connections held: %s; certdrift holds %d descriptors of %d", len(conns), scrape.Round(time.Millisecond), len(fds), fdLimit)
	if len(fds) > 2*maxConns+100 {
		t.Errorf("certdrift holds %d descriptors: more than the two caps of %d allow", len(fds), maxConns)
	}
	if logs := p.logs.String(); strings.Contains(logs, "too many open files") {
		t.Errorf("certdrift ran out of descriptors:\n%s", tail(logs, 2000))
	}
	p.sigterm(t)
}
