package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// RenderPreflightTable writes a preflight for people: the verdict first, then the handshakes
// that would fail (each: who verifies, with which trust, which leaf from whom, in which phase),
// those that could not be judged, the reloads, the assumptions, and the safe order as numbered
// steps. Those that hold are counted, not listed (-o json has every one).
func RenderPreflightTable(w io.Writer, r PreflightReport) error {
	bw := bufio.NewWriter(w)
	counts := map[string]int{}
	for _, h := range r.Handshakes {
		counts[h.Result]++
	}
	restarts := 0
	for _, x := range r.Reloads {
		if x.Mode != ReloadSelf {
			restarts++
		}
	}
	fmt.Fprintf(bw, "certdrift preflight at %s: %s — %d of %s rejected, %d cannot be told, %s to restart or check\n",
		r.GeneratedAt.UTC().Format(time.RFC3339), strings.ToUpper(r.Verdict), counts[HandshakeRejects], plural(len(r.Handshakes), "handshake"),
		counts[HandshakeUnknown], plural(restarts, "Envoy binding"))
	fmt.Fprintln(bw, "\nCANDIDATES")
	for _, c := range r.Candidates {
		var parts []string
		if c.Leaf != nil {
			parts = append(parts, fmt.Sprintf("leaf %s (serial %s, issuer %q)%s", shortFingerprint(c.Leaf.FingerprintSHA256), shortHex(c.Leaf.Serial), c.Leaf.Issuer, pick(c.LeafChanged, "", " unchanged")))
		}
		if len(c.Bundle) > 0 {
			var cas []string
			for _, ca := range c.Bundle {
				cas = append(cas, fmt.Sprintf("%q %s", ca.Subject, shortFingerprint(ca.FingerprintSHA256)))
			}
			parts = append(parts, fmt.Sprintf("bundle [%s]%s", strings.Join(cas, ", "), pick(c.BundleChanged, "", " unchanged")))
		}
		writeWrapped(bw, "  "+clean(refName(c.Source, c.Item))+": ", "      ", clean(strings.Join(parts, "; ")+" from "+c.From))
	}
	for _, sec := range []struct{ title, result string }{{"WOULD FAIL", HandshakeRejects}, {"CANNOT TELL", HandshakeUnknown}} {
		if counts[sec.result] == 0 {
			continue
		}
		fmt.Fprintf(bw, "\n%s\n", sec.title)
		for _, h := range r.Handshakes {
			if h.Result != sec.result {
				continue
			}
			head := fmt.Sprintf("  %-8s %s", strings.ToUpper(h.Result), phaseText(h.Phase))
			if h.Pairing != "" {
				head += ", pairing " + clean(h.Pairing)
			}
			fmt.Fprintln(bw, head)
			writeWrapped(bw, "           ", "           ", tableText(h.Message))
			if h.Reason != "" && h.Result == HandshakeRejects {
				writeWrapped(bw, "           why: ", "                ", tableText(h.Reason))
			}
		}
	}
	if counts[HandshakeAccepts] > 0 {
		fmt.Fprintf(bw, "\n%s hold (-o json lists them)\n", plural(counts[HandshakeAccepts], "handshake"))
	}
	for _, u := range r.Unknowns {
		writeWrapped(bw, "\nCANNOT TELL: ", "  ", tableText(u))
	}
	if len(r.Reloads) > 0 {
		fmt.Fprintln(bw, "\nRELOADS")
		tw := tabwriter.NewWriter(bw, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ENVOY\tSOURCE\tPART\tLOADS IT\tWHY")
		for _, x := range r.Reloads {
			mode := map[string]string{ReloadSelf: "by itself", ReloadRestart: "on restart", ReloadUnknown: "cannot tell"}[x.Mode]
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", clean(x.Envoy), clean(refName(x.Source, x.Item)), x.What, mode, truncateText(clean(x.Why), 70))
		}
		_ = tw.Flush()
	}
	if len(r.Assumptions) > 0 {
		fmt.Fprintln(bw, "\nASSUMED")
		for _, a := range r.Assumptions {
			writeWrapped(bw, "  - ", "    ", tableText(a))
		}
	}
	if len(r.Steps) > 0 {
		fmt.Fprintln(bw, "\nSAFE ORDER")
		for _, s := range r.Steps {
			writeWrapped(bw, "  ", "     ", clean(s))
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write preflight table: %w", err)
	}
	return nil
}

func phaseText(p string) string {
	switch p {
	case PhaseNewLeafCurrentTrust:
		return "new leaf against the trust loaded now"
	case PhaseCurrentLeafNewBundle:
		return "leaf presented now against the new bundle"
	case PhaseNewLeafNewBundle:
		return "new leaf against the new bundle"
	case PhaseNewLeafSNI:
		return "new leaf against the SNIs it is served under"
	case PhaseNewLeafOwnKey:
		return "new leaf with the private key beside it"
	case PhaseNewLeafOwnBundle:
		return "new leaf against its own source's CA bundle"
	}
	return p
}

// RenderPreflightJSON writes r as indented JSON (schema: docs/preflight.md).
func RenderPreflightJSON(w io.Writer, r PreflightReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write json preflight: %w", err)
	}
	return nil
}
