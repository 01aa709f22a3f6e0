// Package collector is certdrift's Prometheus exposition, built the way kube-state-metrics builds
// its own: what a scrape returns is kept pre-rendered per (view, object) — the desired
// certificates of one source, the loaded or served certificates of one Envoy, the trust bundles of
// a view, the findings of the last round — and a scrape concatenates those rows. Rounds replace
// the objects they observe; informer events between rounds replace one source's desired object
// (UpdateDesired), so a Secret change reaches /metrics without a re-judgement. Every series is
// rendered by one function, as a text line from which a protobuf scrape derives its form
// (render.go). What changes with
// the clock alone (ages, counters, histograms) is rendered per scrape by the same function; the
// judgement over time behind drift ages and convergence times is audit.Tracker's. A scrape never
// observes anything itself, so scrapes stay cheap and do not multiply with the number of
// Prometheus replicas (STYLE.md, "Metrics" 5).
package collector

import (
	"bytes"
	"context"
	"errors"
	"hash/fnv"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/probe/tlsprobe"
	"github.com/certdrift/certdrift/ref"
)

// Round is one complete gathering and judgement.
type Round struct {
	Inputs audit.Inputs
	Report audit.Report
	// Started and Finished bound the round; Finished is the time its results are "as of".
	Started, Finished time.Time
	// Kubernetes is set in Kubernetes mode: desired source names are then "namespace/name"
	// (or "configmap:namespace/name") and carry the namespace label.
	Kubernetes bool
	// SourcesUp says, per data source certdrift reads ("files", "kubernetes"), whether it could
	// be read in this round. One series each, not one per Secret: an unreadable Secret is a
	// PARSE_ERROR finding, and 10,000 up series would dwarf what they report.
	SourcesUp map[string]bool
}

// BuildInfo labels certdrift_build_info.
type BuildInfo struct {
	Version, Revision, GoVersion string
}

// Shard selects the part of the world one replica exposes: an object belongs to shard
// fnv32a("namespace/name") mod Total, as kube-state-metrics splits its objects. Judgement still
// sees everything (a pod of this shard may mount a Secret of another), only exposition filters.
type Shard struct {
	Index, Total int
}

// Owns reports whether key ("namespace/name" of a pod or Secret) belongs to this shard.
func (s Shard) Owns(key string) bool {
	if s.Total <= 1 {
		return true
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32()%uint32(s.Total)) == s.Index
}

// Options configure a Store.
type Options struct {
	Shard Shard
	Build BuildInfo
	// Now is the clock for ages computed at scrape time; time.Now when nil.
	Now func() time.Time
}

// Buckets of the histograms, in seconds. Convergence spans the SDS debounce (sub-second) to the
// kubelet's sync period and beyond (minutes); probes span loopback handshakes to timeouts.
var (
	ConvergenceBuckets = []float64{0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800}
	ProbeBuckets       = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)

// Probe kinds and error reasons: closed sets, so that every series can be pre-declared and no
// error text ever becomes a label.
const (
	KindTLS     = "tls"
	KindAdmin   = "admin"
	KindDesired = "desired"
)

var (
	// AdminReasons classify a failed Envoy admin read.
	AdminReasons = []string{"refused", "timeout", "dial", "error"}
	// DesiredReasons classify a desired source that could not be used: not readable at all, or a
	// certificate that does not parse.
	DesiredReasons = []string{"read", "parse"}
	// TLSReasons are tlsprobe's reasons plus a client certificate that could not be loaded.
	TLSReasons = append(append([]string{}, tlsprobe.Reasons...), "client_cert")
)

// Store holds what /metrics exposes. Record is called once per round by the serve loop and
// UpdateDesired by the informers' queue; scrapes (Handler) may run concurrently with both, from
// any number of clients.
type Store struct {
	opt Options

	// wmu serializes the writers (Record, UpdateDesired): each renders the objects it changes and
	// assembles the next exposition outside mu, then swaps it in under mu, so a scrape never
	// waits for a render. The fields below it up to mu belong to the writers.
	wmu sync.Mutex
	// objects are the current objects, by key: the exposed exposition is assembled from them.
	objects objects
	// kubernetes is the last round's Round.Kubernetes: how desired objects are labelled.
	kubernetes bool
	// overrides are desired-view updates applied between rounds, by source name: a round that
	// started before one may have read the older Secret, so Record re-applies them.
	overrides map[string]desiredOverride

	mu  sync.Mutex
	exp *exposition
	// tracker is the drift and convergence clocks as of the last round; drift the stale bindings'
	// series, aged at scrape time.
	tracker      audit.Tracker
	drift        []driftSeries
	convergence  histogram
	probeTLS     histogram
	probeErrors  map[[2]string]uint64
	kubeRequests map[string]uint64
	kubeErrors   map[string]uint64
	reloadOK     bool
	reloadAt     time.Time
	reloadKnown  bool
	rounds       uint64
	lastComplete time.Time
	duration     float64
}

// NewStore returns an empty Store: not ready until its first Record.
func NewStore(opt Options) *Store {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	s := &Store{
		opt:          opt,
		exp:          assemble(nil, nil),
		convergence:  newHistogram(ConvergenceBuckets),
		probeTLS:     newHistogram(ProbeBuckets),
		probeErrors:  map[[2]string]uint64{},
		kubeRequests: map[string]uint64{},
		kubeErrors:   map[string]uint64{},
		overrides:    map[string]desiredOverride{},
	}
	for _, r := range TLSReasons {
		s.probeErrors[[2]string{KindTLS, r}] = 0
	}
	for _, r := range AdminReasons {
		s.probeErrors[[2]string{KindAdmin, r}] = 0
	}
	for _, r := range DesiredReasons {
		s.probeErrors[[2]string{KindDesired, r}] = 0
	}
	return s
}

// Ready reports whether a complete round has been recorded.
func (s *Store) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.lastComplete.IsZero()
}

// Tracker returns the drift and convergence clocks as of the last recorded round (of this
// shard's bindings). The value is never modified afterwards: a caller may keep it.
func (s *Store) Tracker() audit.Tracker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tracker
}

// ConfigReloaded records the outcome of loading the configuration file (the first load counts).
func (s *Store) ConfigReloaded(ok bool, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloadKnown, s.reloadOK = true, ok
	if ok {
		s.reloadAt = at
	}
}

// KubernetesRequest counts one Kubernetes API request by its result: code is the HTTP status code,
// or anything else (client-go says "<error>") when no response came back, counted as "error" so
// the label stays a closed, small set. Every request counts in certdrift_kubernetes_requests_total,
// so that alerts can take errors as a ratio of requests; those with status 400 or above, or no
// response, also count in certdrift_kubernetes_request_errors_total.
func (s *Store) KubernetesRequest(code string) {
	n, err := strconv.Atoi(code)
	if err != nil || n < 100 || n > 599 {
		code, n = "error", 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kubeRequests[code]++
	if n == 0 || n >= 400 {
		s.kubeErrors[code]++
	}
}

// Record makes r the exposed round: its objects replace the previous round's, and the drift and
// convergence clocks advance. Everything is rendered and assembled here, in the round's goroutine
// and before the swap, so that no scrape pays for it and every scrape gets a complete round.
func (s *Store) Record(r Round) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	now := r.Finished
	if now.IsZero() {
		now = s.opt.Now()
	}
	s.mu.Lock()
	tracker := s.tracker
	s.mu.Unlock()
	var owned []audit.Binding
	for _, b := range r.Report.Bindings {
		if s.opt.Shard.Owns(b.Envoy) {
			owned = append(owned, b)
		}
	}
	tracker, progress := tracker.Next(audit.TrackRound{Desired: audit.DesiredSources(r.Inputs), Bindings: owned,
		Started: r.Started, Now: now})

	objs := roundObjects(r, s.opt.Shard, progress.Converging, s.objects)
	// Updates that arrived after the round began may be newer than what it read.
	var late []DesiredUpdate
	for name, o := range s.overrides {
		if o.at.After(r.Started) {
			late = append(late, o.upd)
		} else {
			delete(s.overrides, name)
		}
	}
	if len(late) > 0 {
		objs = objs.withDesired(late, s.opt.Shard, r.Kubernetes)
	}
	var exp *exposition
	if sameRows(objs, s.objects) {
		// Nothing the round renders changed (no Secret, no Envoy, the same judgement): the
		// exposition scrapes hold now is this round's too, so the 3.6 MB text at 10,000 Secrets
		// is not concatenated and gzipped again.
		s.mu.Lock()
		objs, exp = s.objects, s.exp
		s.mu.Unlock()
	} else {
		s.mu.Lock()
		prev := s.exp
		s.mu.Unlock()
		exp = assemble(objs, prev)
	}
	drift := driftSeriesOf(r, progress.Stale)

	s.objects, s.kubernetes = objs, r.Kubernetes
	s.mu.Lock()
	defer s.mu.Unlock()
	s.countProbes(r)
	for _, d := range progress.Converged {
		s.convergence.observe(d.Seconds())
	}
	s.tracker, s.drift, s.exp = tracker, drift, exp
	s.lastComplete = now
	s.duration = now.Sub(r.Started).Seconds()
	s.rounds++
}

// DesiredUpdate is one desired source as the inventory now holds it: Observation replaces every
// desired-view series of the source Observation.Ref names, and Deleted removes them.
type DesiredUpdate struct {
	Observation desired.Observation
	Deleted     bool
}

type desiredOverride struct {
	upd DesiredUpdate
	at  time.Time
}

// UpdateDesired replaces the desired objects of changed sources at once, without waiting for a
// round: a Secret update reaches /metrics in milliseconds instead of after a whole re-judgement
// of every Secret (seconds at 10,000), the way kube-state-metrics updates one object's series per
// informer event. Findings, drift and convergence still come from rounds, which the caller keeps
// running. at is when the change was seen: a round that started before it may have read the
// older object, so Record re-applies it.
func (s *Store) UpdateDesired(upds []DesiredUpdate, at time.Time) {
	if len(upds) == 0 {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for _, u := range upds {
		s.overrides[u.Observation.Ref.String()] = desiredOverride{upd: u, at: at}
	}
	if !s.Ready() {
		return // no round yet: the first one reads the inventory, and Record applies the overrides
	}
	objs := s.objects.withDesired(upds, s.opt.Shard, s.kubernetes)
	s.mu.Lock()
	prev := s.exp
	s.mu.Unlock()
	exp := assemble(objs, prev)
	s.objects = objs
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exp = exp
}

// countProbes adds the round's probe durations and errors to the cumulative counters. Only the
// shard's own Envoys and sources count, so that replicas' counters add up to the fleet's.
func (s *Store) countProbes(r Round) {
	for _, ev := range r.Inputs.Envoys {
		if !s.opt.Shard.Owns(ev.Config.Name) {
			continue
		}
		for _, res := range ev.Served {
			if res.Duration > 0 {
				s.probeTLS.observe(res.Duration.Seconds())
			}
			if res.Err != nil {
				s.probeErrors[[2]string{KindTLS, closedReason(res.Reason, TLSReasons)}]++
			}
		}
		if a := ev.Admin; a != nil && a.CertsErr != nil {
			s.probeErrors[[2]string{KindAdmin, adminReason(a.CertsErr)}]++
		}
	}
	for _, o := range r.Inputs.Desired {
		if !s.opt.Shard.Owns(o.Ref.Key()) {
			continue
		}
		if o.Err != nil {
			s.probeErrors[[2]string{KindDesired, "read"}]++
			continue
		}
		for _, it := range o.Items {
			if it.ChainErr != nil {
				s.probeErrors[[2]string{KindDesired, "parse"}]++
			}
		}
	}
}

// closedReason keeps a reason inside its closed set; anything unexpected counts as the last one.
func closedReason(r string, set []string) string {
	for _, x := range set {
		if x == r {
			return r
		}
	}
	return "handshake"
}

func adminReason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, new(*net.OpError)):
		return "dial"
	}
	return "error"
}

// sourceNamespace is the namespace of a Kubernetes desired source name.
func sourceNamespace(name string, kubernetes bool) string {
	if !kubernetes {
		return ""
	}
	ns, _, ok := strings.Cut(ref.SourceKey(name), "/")
	if !ok {
		return ""
	}
	return ns
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// histogram is a cumulative histogram kept by the store and rendered per scrape.
type histogram struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative
	count  uint64
	sum    float64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]uint64, len(bounds))}
}

func (h *histogram) observe(v float64) {
	h.count++
	h.sum += v
	for i, b := range h.bounds {
		if v <= b {
			h.counts[i]++
			return
		}
	}
}

// cumulativeCounts are the counts of each bucket and all below it, as both formats expose them.
func (h histogram) cumulativeCounts() []uint64 {
	out := make([]uint64, len(h.bounds))
	var c uint64
	for i := range h.bounds {
		c += h.counts[i]
		out[i] = c
	}
	return out
}

// sameRows reports whether a and b render byte for byte the same rows, object by object.
func sameRows(a, b objects) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if x.key != y.key || len(x.rows) != len(y.rows) {
			return false
		}
		for j := range x.rows {
			rx, ry := x.rows[j], y.rows[j]
			if rx.f != ry.f || !bytes.Equal(rx.text, ry.text) || !bytes.Equal(rx.proto, ry.proto) {
				return false
			}
		}
	}
	return true
}
