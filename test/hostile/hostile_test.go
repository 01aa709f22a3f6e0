package hostile

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/certdrift/certdrift/test/cdbin"
	"github.com/certdrift/certdrift/test/certs"
	"github.com/certdrift/certdrift/test/proc"
)

var bin string

// TestMain builds certdrift; CERTDRIFT_HOSTILE_BIN runs the same attacks against another build
// instead (docs/benchmarks.md compares the build before issue 15 this way: there the bounds fail).
func TestMain(m *testing.M) {
	if b := os.Getenv("CERTDRIFT_HOSTILE_BIN"); b != "" {
		bin = b
		os.Exit(m.Run())
	}
	cdbin.Main(m, &bin)
}

// MemoryLimit is the chart's memory limit (deploy/helm values.yaml, 256Mi): the bound every
// hostile run must stay under.
const MemoryLimit = 256 << 20

// envoy is one configured Envoy: an admin URL and TLS endpoints.
type envoy struct {
	name, admin string
	endpoints   []string
	sni         string
	source      string // the desired source the endpoints must serve
}

// desired writes a desired source (a real leaf and its key) and returns its directory and the
// key's PEM, which no output may carry either.
func desired(t *testing.T) (string, []byte) {
	t.Helper()
	ca := certs.NewCA(t)
	leaf := ca.Leaf(t, certs.WithDNSNames("web.example.com"))
	dir := t.TempDir()
	certs.WriteFiles(t, dir, map[string][]byte{"tls.crt": leaf.ChainPEM(), "tls.key": leaf.KeyPEM, "ca.crt": ca.CertPEM})
	return dir, leaf.KeyPEM
}

func writeConfig(t *testing.T, dir string, es []envoy, timeout time.Duration) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "desired:\n  - name: web\n    dir: %s\nenvoys:\n", dir)
	for _, e := range es {
		fmt.Fprintf(&b, "  - name: %s\n    admin: %s\n", e.name, e.admin)
		if len(e.endpoints) > 0 {
			b.WriteString("    endpoints:\n")
			for _, ep := range e.endpoints {
				fmt.Fprintf(&b, "      - address: %s\n", ep)
				if e.sni != "" {
					fmt.Fprintf(&b, "        sni: [%s]\n", e.sni)
				}
				if e.source != "" {
					fmt.Fprintf(&b, "        source: %s\n", e.source)
				}
			}
		}
	}
	fmt.Fprintf(&b, "policy:\n  timeout: %s\n  grace: 1s\n", timeout)
	p := filepath.Join(t.TempDir(), "certdrift.yaml")
	proc.WriteFile(t, p, b.String())
	return p
}

// usage is a finished run of certdrift, with its peak RSS from the kernel's accounting (wait4).
type usage struct {
	code           int
	stdout, stderr string
	maxRSS         int64
	wall           time.Duration
}

func runAudit(t *testing.T, args ...string) usage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"audit"}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	u := usage{stdout: out.String(), stderr: errb.String(), wall: time.Since(start)}
	if cmd.ProcessState == nil {
		t.Fatalf("run certdrift audit: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("certdrift audit did not finish within 3 minutes")
	}
	u.code = cmd.ProcessState.ExitCode()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		u.maxRSS = ru.Maxrss << 10
	}
	return u
}

// eightHostile starts the admins of the memory bound: four streaming 100 MB, four gzip bombs of
// 100 MB, each with a TLS endpoint that stalls or serves a 500-certificate chain.
func eightHostile(t *testing.T) []envoy {
	stall, long := StallTLS(t), LongChainTLS(t, 500)
	var es []envoy
	for i := range 8 {
		var a *Admin
		if i%2 == 0 {
			a = Huge(t)
		} else {
			a = GzipBomb(t)
		}
		ep := stall
		if i%4 == 1 {
			ep = long
		}
		es = append(es, envoy{name: fmt.Sprintf("hostile-%d", i), admin: a.URL, endpoints: []string{ep}})
	}
	return es
}

// TestAuditMemoryUnderHostileAdmins: 8 admins sending 100 MB bodies (plain and gzip-bombed) to an
// audit with --concurrency 32 keep the whole process under the chart's limit, and every one of
// them is reported, not silently dropped.
func TestAuditMemoryUnderHostileAdmins(t *testing.T) {
	dir, _ := desired(t)
	cfg := writeConfig(t, dir, eightHostile(t), 10*time.Second)
	u := runAudit(t, "--config", cfg, "--concurrency", "32", "-o", "json")
	t.Logf("audit, 8 hostile admins (100 MB bodies), --concurrency 32: peak RSS %.1f MiB, wall %s, exit %d",
		float64(u.maxRSS)/(1<<20), u.wall.Round(time.Millisecond), u.code)
	if u.code != 1 {
		t.Fatalf("exit %d, want 1 (findings); stderr:\n%s", u.code, tail(u.stderr, 2000))
	}
	if u.maxRSS > MemoryLimit {
		t.Errorf("peak RSS %d MiB > %d MiB", u.maxRSS>>20, MemoryLimit>>20)
	}
	for i := range 8 {
		if !regexp.MustCompile(fmt.Sprintf(`"envoy":\s*"hostile-%d"`, i)).MatchString(u.stdout) {
			t.Errorf("no finding about hostile-%d: a hostile admin must be reported", i)
		}
	}
}

// exporter is a running certdrift serve.
type exporter struct{ *cdbin.Serve }

func startServe(t *testing.T, args ...string) *exporter {
	t.Helper()
	// rounds() counts the "round complete" lines, which serve logs at debug (a daemon's info log
	// is not a line per round); a later --log.level in args still wins.
	return &exporter{cdbin.StartServe(t, bin, append([]string{"--log.level", "debug"}, args...)...)}
}

func (x *exporter) rounds() int { return strings.Count(x.Logs.String(), `msg="round complete"`) }

func (x *exporter) scrape(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + x.Addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: HTTP %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// status reads VmHWM (peak RSS) and the open file descriptors of the running process.
func (x *exporter) status(t *testing.T) (hwm int64, fds int) {
	t.Helper()
	pid := x.Cmd.Process.Pid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			hwm = kb << 10
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return hwm, len(ents)
}

func metricValue(t *testing.T, body, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no %s in /metrics", name)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestServeMemoryUnderHostileAdmins: the exporter reading 8 hostile admins round after round
// stays under the chart's limit.
func TestServeMemoryUnderHostileAdmins(t *testing.T) {
	dir, _ := desired(t)
	cfg := writeConfig(t, dir, eightHostile(t), 5*time.Second)
	x := startServe(t, "--config", cfg, "--concurrency", "32", "--interval", "1s", "--round-timeout", "8s")
	waitFor(t, "three rounds", 2*time.Minute, func() bool { return x.rounds() >= 3 })
	hwm, _ := x.status(t)
	t.Logf("serve, 8 hostile admins (100 MB bodies), --concurrency 32, 3 rounds: peak RSS %.1f MiB", float64(hwm)/(1<<20))
	if hwm > MemoryLimit {
		t.Errorf("peak RSS %d MiB > %d MiB", hwm>>20, MemoryLimit>>20)
	}
	_ = x.scrape(t)
}

// TestServeConnectionsBounded: rounds every 100ms reuse each admin's connections, so neither
// connections nor goroutines grow with the number of rounds.
func TestServeConnectionsBounded(t *testing.T) {
	dir, _ := desired(t)
	var admins []*Admin
	var es []envoy
	for i := range 4 {
		a := Quiet(t)
		admins = append(admins, a)
		es = append(es, envoy{name: fmt.Sprintf("quiet-%d", i), admin: a.URL})
	}
	cfg := writeConfig(t, dir, es, 2*time.Second)
	x := startServe(t, "--config", cfg, "--interval", "100ms", "--jitter", "0")
	waitFor(t, "10 rounds", time.Minute, func() bool { return x.rounds() >= 10 })
	_, fds10 := x.status(t)
	g10 := metricValue(t, x.scrape(t), "go_goroutines")
	waitFor(t, "60 rounds", 2*time.Minute, func() bool { return x.rounds() >= 60 })
	_, fds60 := x.status(t)
	g60 := metricValue(t, x.scrape(t), "go_goroutines")
	var accepted, open int64
	for _, a := range admins {
		accepted += a.Accepted.Load()
		open += a.Open.Load()
	}
	t.Logf("serve --interval 100ms, 4 admins, %d rounds: %d connections accepted by the admins, %d open; certdrift fds %d -> %d, goroutines %.0f -> %.0f",
		x.rounds(), accepted, open, fds10, fds60, g10, g60)
	// Up to four requests per admin run at once in a round; two idle ones are kept between rounds.
	if max := int64(len(admins) * 4); accepted > max*2 || open > max {
		t.Errorf("%d connections accepted, %d open across %d rounds: want at most %d accepted and %d open", accepted, open, x.rounds(), max*2, max)
	}
	if fds60 > fds10+8 || g60 > g10+20 {
		t.Errorf("between round 10 and 60: fds %d -> %d, goroutines %.0f -> %.0f: they grow with rounds", fds10, fds60, g10, g60)
	}
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
