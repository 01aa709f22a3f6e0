// Package collector turns certdrift's rounds (gathered audit inputs and their judgement) into
// Prometheus metrics. A Store keeps the latest round as an immutable snapshot of ready-made
// series plus what needs memory across rounds — how long each binding has been stale, how long
// each rotation took to converge, cumulative probe errors and durations — and its collectors
// build const metrics from that in Collect. A scrape never observes anything itself: it reads the
// snapshot, so scrapes stay cheap and do not multiply with the number of Prometheus replicas
// (STYLE.md, "Metrics" 5).
package collector

import (
	"context"
	"errors"
	"hash/fnv"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/tlsprobe"
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

// Store holds what the collectors expose. Record is called once per round by the serve loop;
// Collect may run concurrently from any number of scrapes.
type Store struct {
	opt Options

	// wmu serializes the writers (Record, UpdateDesired): each builds and renders the next
	// snapshot outside mu, then swaps it in with its text under mu, so a scrape never waits for
	// a render and never sees a snapshot without its text.
	wmu sync.Mutex
	// overrides are desired-view updates applied between rounds, by source name: a round that
	// started before one may have read the older Secret, so Record re-applies them.
	overrides map[string]desiredOverride

	mu   sync.Mutex
	snap *snapshot
	// Across rounds.
	bindings     map[bindingKey]*bindingTrack
	convergence  histogram
	probeTLS     histogram
	probeErrors  map[[2]string]uint64
	kubeErrors   map[string]uint64
	reloadOK     bool
	reloadAt     time.Time
	reloadKnown  bool
	rounds       uint64
	lastComplete time.Time
	// certCache holds the certificate families rendered for certCacheFor.
	certCache    []*dto.MetricFamily
	certCacheFor *snapshot
	// text is the rendered certificate text of a snapshot (see Handler).
	text *textCache
}

// NewStore returns an empty Store: not ready until its first Record.
func NewStore(opt Options) *Store {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	s := &Store{
		opt:         opt,
		snap:        &snapshot{},
		bindings:    map[bindingKey]*bindingTrack{},
		convergence: newHistogram(ConvergenceBuckets),
		probeTLS:    newHistogram(ProbeBuckets),
		probeErrors: map[[2]string]uint64{},
		kubeErrors:  map[string]uint64{},
		overrides:   map[string]desiredOverride{},
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

// ConfigReloaded records the outcome of loading the configuration file (the first load counts).
func (s *Store) ConfigReloaded(ok bool, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloadKnown, s.reloadOK = true, ok
	if ok {
		s.reloadAt = at
	}
}

// KubernetesRequestError counts one failed Kubernetes API request; code is the HTTP status code
// or "error" when no response came back (a closed, small set).
func (s *Store) KubernetesRequestError(code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kubeErrors[code]++
}

// Record makes r the exposed round and advances the cross-round tracking. The round's
// certificate families and their text are rendered here, in the round's goroutine and before the
// swap, so that no scrape pays for them and every scrape gets the last complete text.
func (s *Store) Record(r Round) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	now := r.Finished
	if now.IsZero() {
		now = s.opt.Now()
	}
	snap := buildSnapshot(r, s.opt.Shard)
	snap.finished = now
	snap.duration = now.Sub(r.Started).Seconds()
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
		snap = snap.withDesired(late, s.opt.Shard)
	}
	mfs, text := renderCerts(snap)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.countProbes(r)
	s.track(r, snap, now) // snap is not yet visible: track may still fill its drift series
	s.snap = snap
	s.certCache, s.certCacheFor = mfs, snap
	s.text = text
	s.lastComplete = now
	s.rounds++
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
		if !s.opt.Shard.Owns(sourceKey(o.Source.Name)) {
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

// sourceKey is the shard key of a desired source: its "namespace/name".
func sourceKey(name string) string { return strings.TrimPrefix(name, "configmap:") }

// sourceNamespace is the namespace of a Kubernetes desired source name.
func sourceNamespace(name string, kubernetes bool) string {
	if !kubernetes {
		return ""
	}
	ns, _, ok := strings.Cut(sourceKey(name), "/")
	if !ok {
		return ""
	}
	return ns
}

// bindingKey identifies a binding across rounds: one per Envoy and desired certificate (the
// audit keeps one binding per pair).
type bindingKey struct{ envoy, source, item string }

// bindingTrack is what is remembered of one binding between rounds.
type bindingTrack struct {
	labels []string // identity labels, for the drift-age series
	// desired is the desired leaf fingerprint last seen for the binding's source.
	desired string
	// rotationStart is set while a rotation is pending: from when the desired certificate changed
	// (or, when that is not known, from when certdrift first saw the binding differ) until the
	// binding is seen converged, which observes the convergence histogram.
	rotationStart time.Time
	// driftSince is when the current episode of differing began (converging or stale); zero when
	// converged.
	driftSince time.Time
	// convergedAt is the start of the last round that saw the binding converged: a desired change
	// dated before it cannot be the one the binding now differs from.
	convergedAt time.Time
}

// track advances drift and convergence clocks. A rotation clock runs for every binding whose
// Envoy does not load and serve its desired certificate: it starts when the desired fingerprint
// changes under certdrift's eyes, and also when a binding is first judged differing — above all
// in the first round of a process that starts after the rotation. Either way it starts at the
// source's change time (the file's mtime, the Secret's change time) when that is known and
// plausible, so the first round agrees with `certdrift audit`, which dates drift the same way.
// The clock stops, observing the convergence histogram, once the binding is converged: each
// binding observes its own time, so a fleet where one Envoy never reloads still records the ones
// that did — and the laggard stays in certdrift_bindings_converging.
func (s *Store) track(r Round, snap *snapshot, now time.Time) {
	desired := map[[2]string]desiredLeaf{}
	for _, o := range r.Inputs.Desired {
		for _, it := range o.Items {
			if len(it.Chain) == 0 {
				continue
			}
			desired[[2]string{o.Source.Name, it.Name}] = desiredLeaf{fp: pki.Fingerprint(it.Chain[0]), changedAt: o.ChangedAt}
		}
	}
	started := cmpTime(r.Started, now)
	ids := envoyIdentities(r)
	present := map[bindingKey]bool{}
	converging := 0
	for _, b := range r.Report.Bindings {
		if !s.opt.Shard.Owns(b.Envoy) {
			continue
		}
		k := bindingKey{b.Envoy, b.Source, b.Item}
		if present[k] {
			continue
		}
		present[k] = true
		t := s.bindings[k]
		if t == nil {
			t = &bindingTrack{}
			s.bindings[k] = t
		}
		id := ids[b.Envoy]
		t.labels = []string{id.namespace, cmpOr(b.Workload, id.workload), id.pod, b.Envoy, b.Source, b.Item}
		d, ok := desired[[2]string{b.Source, b.Item}]
		if ok && t.desired != "" && d.fp != t.desired {
			// A rotation seen happening: the clock (re)starts even if the binding already
			// converged within this round, so fast reloads are observed too.
			t.rotationStart = t.changeTime(d.changedAt, now)
		}
		if ok {
			t.desired = d.fp
		}
		switch b.State {
		case audit.StateConverged:
			if !t.rotationStart.IsZero() {
				s.convergence.observe(now.Sub(t.rotationStart).Seconds())
				t.rotationStart = time.Time{}
			}
			t.driftSince = time.Time{}
			t.convergedAt = started
		case audit.StateConverging, audit.StateStale:
			if t.rotationStart.IsZero() {
				// Differing without a rotation seen: the process started after it, the binding
				// was unknown until now, or the Envoy went back to an older certificate.
				t.rotationStart = t.changeTime(d.changedAt, now)
			}
			if t.driftSince.IsZero() {
				t.driftSince = t.rotationStart
			}
		}
		if !t.rotationStart.IsZero() {
			converging++
		}
		if b.State == audit.StateStale {
			snap.drift = append(snap.drift, driftSeries{labels: t.labels, since: t.driftSince})
		}
	}
	// A deleted Envoy or source takes its clocks with it.
	for k := range s.bindings {
		if !present[k] {
			delete(s.bindings, k)
		}
	}
	snap.converging = converging
}

// changeTime is when a rotation the binding now differs from began: the desired source's change
// time when it is known, not in the future, and after the binding was last seen converged (an
// mtime kept by a copy can be older than that, and would inflate the convergence time); else now,
// the first round that saw it.
func (t *bindingTrack) changeTime(changedAt, now time.Time) time.Time {
	if changedAt.IsZero() || changedAt.After(now) || !changedAt.After(t.convergedAt) {
		return now
	}
	return changedAt
}

type desiredLeaf struct {
	fp        string
	changedAt time.Time
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func cmpTime(a, b time.Time) time.Time {
	if !a.IsZero() {
		return a
	}
	return b
}

// histogram is a cumulative histogram kept by the store and exposed as a const histogram.
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

// cumulative returns the buckets in the form prometheus.MustNewConstHistogram takes.
func (h *histogram) cumulative() map[float64]uint64 {
	m := make(map[float64]uint64, len(h.bounds))
	var c uint64
	for i, b := range h.bounds {
		c += h.counts[i]
		m[b] = c
	}
	return m
}
