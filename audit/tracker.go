package audit

import (
	"time"
)

// TrackKey identifies a binding across rounds: one per Envoy and desired certificate (Run keeps
// one binding per pair).
type TrackKey struct{ Envoy, Source, Item string }

// Clock is what is remembered of one binding between rounds.
type Clock struct {
	// Desired is the desired leaf fingerprint last seen for the binding's source.
	Desired string
	// RotationStart is set while a rotation is pending: from when the desired certificate changed
	// (or, when that is not known, from when the binding was first seen to differ) until the
	// binding is seen converged.
	RotationStart time.Time
	// DriftSince is when the current episode of differing began (converging or stale); zero when
	// converged.
	DriftSince time.Time
	// ConvergedAt is the start of the last round that saw the binding converged: a desired change
	// dated before it cannot be the one the binding now differs from.
	ConvergedAt time.Time
}

// Tracker is judgement over time: how long each binding has differed from its desired
// certificate, and how long each rotation took to reach the Envoy. Run judges one round; the
// Tracker follows its bindings from round to round. A Tracker is a value: Next returns a new one
// and leaves its receiver as it was, so a reader (the collector, repair) may keep one without a
// lock while the next round advances. The zero Tracker has seen nothing.
type Tracker struct {
	clocks map[TrackKey]Clock
}

// TrackRound is what the Tracker needs of one round. The times are the clock, injected: the
// Tracker never reads the time itself.
type TrackRound struct {
	// Desired are the round's desired sources (for each item's leaf fingerprint and the source's
	// change time).
	Desired []DesiredSource
	// Bindings are the judged bindings to follow; a binding absent here (a deleted Envoy or
	// source, or one another shard follows) loses its clocks.
	Bindings []Binding
	// Started and Now bound the round: Now is the time its verdicts are "as of".
	Started, Now time.Time
}

// DesiredSource is the part of a desired observation the Tracker reads.
type DesiredSource struct {
	Source    string
	ChangedAt time.Time
	// Leaves are the items' leaf fingerprints by item name.
	Leaves map[string]string
}

// DesiredSources extracts what the Tracker reads from a round's inputs.
func DesiredSources(in Inputs) []DesiredSource {
	out := make([]DesiredSource, 0, len(in.Desired))
	for _, o := range in.Desired {
		d := DesiredSource{Source: o.Ref.String(), ChangedAt: o.ChangedAt}
		for _, it := range o.Items {
			fp := it.LeafFingerprint()
			if fp == "" {
				continue
			}
			if d.Leaves == nil {
				d.Leaves = make(map[string]string, len(o.Items))
			}
			d.Leaves[it.Name] = fp
		}
		out = append(out, d)
	}
	return out
}

// Progress is what one round showed over time.
type Progress struct {
	// Converged are the rotations that completed in this round, one per binding: the time from
	// the rotation's start to the round.
	Converged []time.Duration
	// Stale are the round's stale bindings with when their drift began.
	Stale []StaleBinding
	// Converging counts the pending rotations: bindings whose rotation clock runs, whatever the
	// round's verdict (converging, stale or unknown).
	Converging int
}

// StaleBinding is a stale binding and when its drift began.
type StaleBinding struct {
	Binding Binding
	Since   time.Time
}

// Clock returns the clocks of one binding, as of the last round.
func (t Tracker) Clock(k TrackKey) (Clock, bool) {
	c, ok := t.clocks[k]
	return c, ok
}

// Len is the number of bindings followed.
func (t Tracker) Len() int { return len(t.clocks) }

// Next advances the clocks by one round and returns the new Tracker with what the round showed.
//
// A rotation clock runs for every binding whose Envoy does not load and serve its desired
// certificate: it starts when the desired fingerprint changes between rounds, and also when a
// binding is first judged differing — above all in the first round of a process that starts after
// the rotation. Either way it starts at the source's change time (the file's mtime, the Secret's
// change time) when that is known and plausible, so the first round agrees with `certdrift audit`,
// which dates drift the same way. The clock stops, observing one convergence, once the binding is
// converged: each binding observes its own time, so a fleet where one Envoy never reloads still
// records the ones that did — and the laggard stays counted as converging.
func (t Tracker) Next(r TrackRound) (Tracker, Progress) {
	desired := map[[2]string]desiredLeaf{}
	for _, d := range r.Desired {
		for item, fp := range d.Leaves {
			desired[[2]string{d.Source, item}] = desiredLeaf{fp: fp, changedAt: d.ChangedAt}
		}
	}
	now := r.Now
	started := r.Started
	if started.IsZero() {
		started = now
	}
	next := Tracker{clocks: make(map[TrackKey]Clock, len(r.Bindings))}
	var p Progress
	for _, b := range r.Bindings {
		k := TrackKey{b.Envoy, b.Source, b.Item}
		if _, dup := next.clocks[k]; dup {
			continue
		}
		c := t.clocks[k] // a copy: the receiver is never modified
		d, ok := desired[[2]string{b.Source, b.Item}]
		if ok && c.Desired != "" && d.fp != c.Desired {
			// A rotation seen happening: the clock (re)starts even if the binding already
			// converged within this round, so fast reloads are observed too.
			c.RotationStart = c.changeTime(d.changedAt, now)
		}
		if ok {
			c.Desired = d.fp
		}
		switch b.State {
		case StateConverged:
			if !c.RotationStart.IsZero() {
				p.Converged = append(p.Converged, now.Sub(c.RotationStart))
				c.RotationStart = time.Time{}
			}
			c.DriftSince = time.Time{}
			c.ConvergedAt = started
		case StateConverging, StateStale:
			if c.RotationStart.IsZero() {
				// Differing without a rotation seen: the process started after it, the binding
				// was unknown until now, or the Envoy went back to an older certificate.
				c.RotationStart = c.changeTime(d.changedAt, now)
			}
			if c.DriftSince.IsZero() {
				c.DriftSince = c.RotationStart
			}
		}
		if !c.RotationStart.IsZero() {
			p.Converging++
		}
		if b.State == StateStale {
			p.Stale = append(p.Stale, StaleBinding{Binding: b, Since: c.DriftSince})
		}
		next.clocks[k] = c
	}
	return next, p
}

// changeTime is when a rotation the binding now differs from began: the desired source's change
// time when it is known, not in the future, and after the binding was last seen converged (an
// mtime kept by a copy can be older than that, and would inflate the convergence time); else now,
// the first round that saw it.
func (c Clock) changeTime(changedAt, now time.Time) time.Time {
	if changedAt.IsZero() || changedAt.After(now) || !changedAt.After(c.ConvergedAt) {
		return now
	}
	return changedAt
}

type desiredLeaf struct {
	fp        string
	changedAt time.Time
}
