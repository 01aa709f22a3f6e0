package collector

import (
	"bytes"
	"strings"
	"time"

	"github.com/certdrift/certdrift/probe/files"
)

// DesiredUpdate is one desired source as the inventory now holds it: Observation replaces every
// desired-view series of Observation.Source.Name, and Deleted removes them.
type DesiredUpdate struct {
	Observation files.Observation
	Deleted     bool
}

type desiredOverride struct {
	upd DesiredUpdate
	at  time.Time
}

// UpdateDesired puts changed desired sources into the exposed snapshot at once, without waiting
// for a round: a Secret update reaches /metrics in milliseconds instead of after a whole
// re-judgement of every Secret (seconds at 10,000), the way kube-state-metrics patches one
// object's series per informer event. Findings, drift and convergence still come from rounds,
// which the caller keeps running. The next snapshot is a copy (scrapes keep reading the old one
// until the swap), and its text is the old text with the sources' lines cut out and the new ones
// spliced in at the end of their families, not a whole re-render. at is when the change was
// seen: a round that started before it may have read the older object, so Record re-applies it.
func (s *Store) UpdateDesired(upds []DesiredUpdate, at time.Time) {
	if len(upds) == 0 {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for _, u := range upds {
		s.overrides[u.Observation.Source.Name] = desiredOverride{upd: u, at: at}
	}
	s.mu.Lock()
	old, oldText := s.snap, s.text
	s.mu.Unlock()
	if old.finished.IsZero() {
		return // no round yet: the first one reads the inventory, and Record applies the overrides
	}
	next := old.withDesired(upds, s.opt.Shard)
	var text *textCache
	if oldText != nil && oldText.snap == old {
		text = spliceDesired(oldText, old, next, upds)
	}
	if text == nil {
		_, text = renderCerts(next)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snap, s.text = next, text
	// The families for the fallback path are gathered again on its first use.
	s.certCache, s.certCacheFor = nil, nil
}

// withDesired returns a copy of snap whose desired series of the updated sources are replaced.
// snap itself is not modified: it may be in use by scrapes.
func (snap *snapshot) withDesired(upds []DesiredUpdate, shard Shard) *snapshot {
	names := updatedSources(upds)
	next := *snap
	next.certs = make([]certSeries, 0, len(snap.certs)+len(upds))
	seen := map[string]bool{}
	for _, c := range snap.certs {
		if c.src != "" && names[c.src] {
			continue
		}
		next.certs = append(next.certs, c)
		if c.labels[0] == "desired" {
			seen[joinKey(c.labels)] = true
		}
	}
	for _, u := range upds {
		if u.Deleted || !shard.Owns(sourceKey(u.Observation.Source.Name)) {
			continue
		}
		for _, c := range desiredSeries(u.Observation, snap.kubernetes) {
			if k := joinKey(c.labels); !seen[k] {
				seen[k] = true
				next.certs = append(next.certs, c)
			}
		}
	}
	return &next
}

func updatedSources(upds []DesiredUpdate) map[string]bool {
	names := make(map[string]bool, len(upds))
	for _, u := range upds {
		names[u.Observation.Source.Name] = true
	}
	return names
}

// spliceDesired derives next's text from old's: every desired line of an updated source is cut,
// and the sources' new lines (rendered by the same encoder as a whole round) go at the end of
// their families. The text format does not order samples within a family, and the next round
// renders it sorted again. nil when the new lines cannot be rendered.
func spliceDesired(oldText *textCache, old, next *snapshot, upds []DesiredUpdate) *textCache {
	names := updatedSources(upds)
	cut := map[string]bool{}
	for _, c := range old.certs {
		if c.src != "" && names[c.src] {
			cut[escapeLabelValue(c.labels[2])] = true
		}
	}
	var added []certSeries
	for _, c := range next.certs {
		if c.src != "" && names[c.src] {
			added = append(added, c)
		}
	}
	addText, err := encodeText(gatherCerts(&snapshot{certs: added}))
	if err != nil {
		return nil
	}
	headers, bodies, order := splitFamilies(addText)

	src := oldText.plain
	out := make([]byte, 0, len(src)+len(addText))
	family, famStart, samples := "", 0, 0
	endFamily := func() {
		if family == "" {
			return
		}
		if b := bodies[family]; len(b) > 0 {
			out = append(out, b...)
			samples++
		}
		delete(bodies, family)
		if samples == 0 {
			out = out[:famStart] // a family left empty loses its HELP and TYPE too, as promhttp does
		}
	}
	for len(src) > 0 {
		var line []byte
		line, src = cutLine(src)
		if name, ok := helpName(line); ok && name != family {
			endFamily()
			family, famStart, samples = name, len(out), 0
		}
		if len(line) > 0 && line[0] != '#' {
			if desiredLineOf(line, cut) {
				continue
			}
			samples++
		}
		out = append(out, line...)
	}
	endFamily()
	// Families the old text did not have at all (no desired series before).
	for _, name := range order {
		if b, ok := bodies[name]; ok {
			out = append(out, headers[name]...)
			out = append(out, b...)
		}
	}
	gz, err := gzipBytes(out)
	if err != nil {
		return nil
	}
	return &textCache{snap: next, plain: out, gz: gz}
}

// splitFamilies splits a text exposition into each family's comment lines and sample lines.
func splitFamilies(text []byte) (headers, bodies map[string][]byte, order []string) {
	headers, bodies = map[string][]byte{}, map[string][]byte{}
	family := ""
	for len(text) > 0 {
		var line []byte
		line, text = cutLine(text)
		if name, ok := helpName(line); ok && name != family {
			family = name
			order = append(order, name)
		}
		if len(line) > 0 && line[0] == '#' {
			headers[family] = append(headers[family], line...)
		} else {
			bodies[family] = append(bodies[family], line...)
		}
	}
	return headers, bodies, order
}

// cutLine splits the first line (with its newline, if any) off text.
func cutLine(text []byte) (line, rest []byte) {
	if i := bytes.IndexByte(text, '\n'); i >= 0 {
		return text[:i+1], text[i+1:]
	}
	return text, nil
}

// helpName is the family a "# HELP name ..." or "# TYPE name ..." line starts.
func helpName(line []byte) (string, bool) {
	for _, p := range []string{"# HELP ", "# TYPE "} {
		if rest, ok := bytes.CutPrefix(line, []byte(p)); ok {
			name, _, _ := bytes.Cut(rest, []byte(" "))
			return string(bytes.TrimRight(name, "\n")), true
		}
	}
	return "", false
}

// desiredLineOf reports whether a sample line is of the desired view and its source label is
// one of cut (escaped values). Inside an escaped value every quote follows a backslash, so
// `,source="` can only be the start of the source label.
func desiredLineOf(line []byte, cut map[string]bool) bool {
	open := bytes.IndexByte(line, '{')
	if open < 0 {
		return false
	}
	labels := line[open:]
	if !bytes.Contains(labels, []byte(`{view="desired"`)) && !bytes.Contains(labels, []byte(`,view="desired"`)) {
		return false
	}
	i := bytes.Index(labels, []byte(`{source="`))
	if i < 0 {
		i = bytes.Index(labels, []byte(`,source="`))
	}
	if i < 0 {
		return false
	}
	v := labels[i+len(`,source="`):]
	for j := 0; j < len(v); j++ {
		switch v[j] {
		case '\\':
			j++
		case '"':
			return cut[string(v[:j])]
		}
	}
	return false
}

// escapeLabelValue escapes a label value as the text format writes it.
func escapeLabelValue(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}
