// Package shardcheck proves on a real cluster that `certdrift serve --total-shards N` replicas
// together expose what one unsharded `serve` does: each object's series from exactly one replica,
// the counts summing to the fleet's. A shard probes only its own Envoy pods and judges only the
// sources they need plus those it owns (gather.KubeOptions.Shard), so a binding between a pod of
// one shard and a Secret of another is where a split could lose or duplicate a verdict; Agree
// picks a shard count at which the scenario has such a binding and fails when none has one.
package shardcheck

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/collector"
	"github.com/certdrift/certdrift/test/cdbin"
)

// How each family of the exposition combines over replicas.
var (
	// disjoint: every series comes from exactly one replica, with the unsharded value.
	disjoint = []string{
		"certdrift_finding", "certdrift_certificate_info", "certdrift_certificate_not_before_timestamp_seconds",
		"certdrift_certificate_not_after_timestamp_seconds", "certdrift_envoy_admin_up",
		"certdrift_certmanager_certificate_revision", "certdrift_certmanager_certificate_ready",
		"certdrift_certmanager_certificate_renewal_timestamp_seconds", "certdrift_certmanager_revision",
	}
	// disjointLabels: as disjoint, comparing label sets only (the value is an age).
	disjointLabels = []string{"certdrift_drift_age_seconds"}
	// shared: a CA several replicas' sources hold is exposed by each (docs/metrics.md).
	shared = []string{"certdrift_ca_certificate_info", "certdrift_ca_certificate_not_after_timestamp_seconds"}
	// summed: counts that add up over replicas.
	summed = []string{"certdrift_bindings", "certdrift_bindings_converging", "certdrift_coverage_bindings",
		"certdrift_coverage_handshakes", "certdrift_coverage_gaps", "certdrift_ca_certificate_bundles"}
)

// Agree runs bin's serve once unsharded and then as every replica of N shards, each with
// --kubeconfig kubeconfig and args (the scenario's --namespace, --grace), takes each one's
// exposition after its first round, and compares. The scenario must be settled: nothing may
// change between the rounds.
func Agree(t testing.TB, bin, kubeconfig string, args ...string) {
	t.Helper()
	whole := exposition(t, start(t, bin, kubeconfig, 1, 0, args), 1, 0)
	if len(whole["certdrift_certificate_info"]) == 0 {
		t.Fatalf("shardcheck: the unsharded exposition has no certificate series; nothing to split")
	}
	total := crossingTotal(whole)
	if total == 0 {
		t.Fatalf("shardcheck: no shard count from 2 to 8 puts an Envoy and a source it holds in different shards; the scenario proves nothing about the split")
	}
	// The replicas run at once; each is read after its own first round.
	servers := make([]*cdbin.Serve, total)
	for i := range total {
		servers[i] = start(t, bin, kubeconfig, total, i, args)
	}
	parts := make([]map[string]map[string]float64, total)
	for i, srv := range servers {
		parts[i] = exposition(t, srv, total, i)
	}
	if slices.ContainsFunc(parts, func(p map[string]map[string]float64) bool { return p == nil }) {
		return // exposition said why
	}
	compare(t, total, whole, parts)
}

// compare checks parts (one exposition per replica) against whole.
func compare(t testing.TB, total int, whole map[string]map[string]float64, parts []map[string]map[string]float64) {
	t.Helper()
	check := func(fam string, combine func(seen map[string]float64, series string, v float64, replica int) error) {
		got := map[string]float64{}
		for i, p := range parts {
			for series, v := range p[fam] {
				if err := combine(got, series, v, i); err != nil {
					t.Errorf("%d shards: %s: %v", total, fam, err)
				}
			}
		}
		want := whole[fam]
		if want == nil {
			want = map[string]float64{}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%d shards: %s over the replicas (-unsharded +sharded):\n%s", total, fam, diff)
		}
	}
	owner := map[string]int{}
	once := func(got map[string]float64, series string, v float64, replica int) error {
		if _, dup := got[series]; dup {
			return fmt.Errorf("replicas %d and %d both expose %s", owner[series], replica, series)
		}
		got[series], owner[series] = v, replica
		return nil
	}
	for _, fam := range disjoint {
		check(fam, once)
	}
	for _, fam := range disjointLabels {
		for _, expo := range append([]map[string]map[string]float64{whole}, parts...) {
			for series := range expo[fam] {
				expo[fam][series] = 0 // the label sets are compared, not the ages
			}
		}
		check(fam, once)
	}
	for _, fam := range shared {
		check(fam, func(got map[string]float64, series string, v float64, _ int) error {
			if old, ok := got[series]; ok && old != v {
				return fmt.Errorf("%s is %v on one replica and %v on another", series, old, v)
			}
			got[series] = v
			return nil
		})
	}
	for _, fam := range summed {
		check(fam, func(got map[string]float64, series string, v float64, _ int) error {
			got[series] += v
			return nil
		})
	}
	// Complete only when every replica is.
	want, got := whole["certdrift_coverage_complete"]["certdrift_coverage_complete"], 1.0
	for _, p := range parts {
		got = min(got, p["certdrift_coverage_complete"]["certdrift_coverage_complete"])
	}
	if got != want {
		t.Errorf("%d shards: certdrift_coverage_complete: the least over replicas is %v, unsharded %v", total, got, want)
	}
	for i, p := range parts {
		t.Logf("OBSERVED: shard %d of %d exposes %d certificate series, %d findings", i, total, len(p["certdrift_certificate_info"]), len(p["certdrift_finding"]))
	}
}

// crossingTotal is the least shard count from 2 to 8 at which some Envoy's loaded or served
// certificate comes from a source of another shard, 0 if there is none.
func crossingTotal(whole map[string]map[string]float64) int {
	var pairs [][2]string // envoy, source key
	for series := range whole["certdrift_certificate_info"] {
		envoy, source := label(series, "envoy"), label(series, "source")
		if envoy != "" && source != "" {
			pairs = append(pairs, [2]string{envoy, strings.TrimPrefix(source, "configmap:")})
		}
	}
	for total := 2; total <= 8; total++ {
		for _, p := range pairs {
			if shardOf(p[0], total) != shardOf(p[1], total) {
				return total
			}
		}
	}
	return 0
}

func shardOf(key string, total int) int {
	for i := range total {
		if (collector.Shard{Index: i, Total: total}).Owns(key) {
			return i
		}
	}
	return -1
}

// start starts one replica (cdbin.StartServe, on the test goroutine: it may call t.Fatal).
func start(t testing.TB, bin, kubeconfig string, total, shard int, args []string) *cdbin.Serve {
	t.Helper()
	full := append([]string{"--kubeconfig", kubeconfig, "--interval", "1h", "--jitter", "0",
		"--total-shards", strconv.Itoa(total), "--shard", strconv.Itoa(shard)}, args...)
	return cdbin.StartServe(t, bin, full...)
}

// exposition waits for srv's first round (/-/ready), takes /metrics and stops it (StartServe's
// cleanup checks the exit): family → series → value, nil after an error.
func exposition(t testing.TB, srv *cdbin.Serve, total, shard int) map[string]map[string]float64 {
	t.Helper()
	defer func() { _ = srv.Cmd.Process.Signal(syscall.SIGTERM) }()
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (int, string, error) {
		resp, err := client.Get("http://" + srv.Addr + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		return resp.StatusCode, string(b), err
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		code, _, err := get("/-/ready")
		if err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("shard %d of %d: not ready after 90s (last: %d %v)\n%s", shard, total, code, err, srv.Logs.String())
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	code, body, err := get("/metrics")
	if err != nil || code != http.StatusOK {
		t.Errorf("shard %d of %d: /metrics: %d %v", shard, total, code, err)
		return nil
	}
	return parse(body)
}

// parse reads a text exposition into family → series → value.
func parse(body string) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		series := line[:sp]
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		fam := series
		if i := strings.IndexByte(series, '{'); i >= 0 {
			fam = series[:i]
		}
		if out[fam] == nil {
			out[fam] = map[string]float64{}
		}
		out[fam][series] = v
	}
	return out
}

// label is one label's value in a series as the exposition writes it (certdrift's values hold
// no escaped quotes in the labels read here: names and keys).
func label(series, name string) string {
	i := strings.Index(series, name+`="`)
	if i < 0 || (i > 0 && series[i-1] != '{' && series[i-1] != ',') {
		return ""
	}
	rest := series[i+len(name)+2:]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return rest[:j]
}
