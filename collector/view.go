package collector

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// storeView is a consistent copy of what one Collect exposes.
type storeView struct {
	now          time.Time
	snap         *snapshot
	convergence  histogram
	probeTLS     histogram
	probeErrors  map[[2]string]uint64
	kubeErrors   map[string]uint64
	reloadKnown  bool
	reloadOK     bool
	reloadAt     time.Time
	rounds       uint64
	lastComplete time.Time
}

func (h histogram) clone() histogram {
	h.counts = append([]uint64(nil), h.counts...)
	return h
}

// view copies the cumulative state under the lock; the snapshot itself is immutable.
func (s *Store) view() storeView {
	now := s.opt.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	return storeView{
		now: now, snap: s.snap,
		convergence: s.convergence.clone(), probeTLS: s.probeTLS.clone(),
		probeErrors: maps.Clone(s.probeErrors), kubeErrors: maps.Clone(s.kubeErrors),
		reloadKnown: s.reloadKnown, reloadOK: s.reloadOK, reloadAt: s.reloadAt,
		rounds: s.rounds, lastComplete: s.lastComplete,
	}
}

func (s *Store) current() *snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

// Collectors returns the store's collectors: certificates, CA certificates, findings, self-health.
func (s *Store) Collectors() []prometheus.Collector {
	return []prometheus.Collector{certificateCollector{s: s}, caCollector{s: s}, findingCollector{s}, healthCollector{s}}
}

// Registry returns a new registry holding only the store's collectors: certdrift's domain
// metrics. go_* and process_* belong in a registry of their own (STYLE.md, "Metrics" 1).
func (s *Store) Registry() (*prometheus.Registry, error) {
	reg := prometheus.NewPedanticRegistry()
	for _, c := range s.Collectors() {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// Gatherer is what /metrics serves: the same metrics as Registry, but the certificate families —
// most of the exposition, and changed only by a round — are gathered once per round (Record
// renders them) instead of once per scrape. The rest is small and gathered on every scrape, so
// ages stay current. extra (e.g. the go_/process_ registry) is appended; its names must not start
// with certdrift_.
func (s *Store) Gatherer(extra ...prometheus.Gatherer) (prometheus.Gatherer, error) {
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{findingCollector{s}, healthCollector{s}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	gs := append([]prometheus.Gatherer{reg}, extra...)
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		out := slices.Clone(s.certFamilies())
		var errs []error
		for _, g := range gs {
			mfs, err := g.Gather()
			if err != nil {
				errs = append(errs, err)
			}
			out = append(out, mfs...)
		}
		slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return cmp.Compare(a.GetName(), b.GetName()) })
		if len(errs) > 0 {
			return out, prometheus.MultiError(errs)
		}
		return out, nil
	}), nil
}

// certFamilies returns the certificate families of the current snapshot, rendering them on
// first use. The families are shared by concurrent scrapes and never modified.
func (s *Store) certFamilies() []*dto.MetricFamily {
	s.mu.Lock()
	snap, cached, cachedFor := s.snap, s.certCache, s.certCacheFor
	s.mu.Unlock()
	if cachedFor == snap && cached != nil {
		return cached
	}
	mfs := gatherCerts(snap)
	s.mu.Lock()
	if s.snap == snap {
		s.certCache, s.certCacheFor = mfs, snap
	}
	s.mu.Unlock()
	return mfs
}

// gatherCerts gathers the certificate families (leaves and CAs) of one snapshot.
func gatherCerts(snap *snapshot) []*dto.MetricFamily {
	reg := prometheus.NewRegistry()
	reg.MustRegister(certificateCollector{snap: snap}, caCollector{snap: snap})
	mfs, err := reg.Gather()
	if err != nil {
		// Const metrics from a snapshot cannot be inconsistent short of a programming error;
		// expose what gathered rather than nothing.
		return nil
	}
	return mfs
}
