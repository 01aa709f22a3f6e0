package pki

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"strings"
	"time"
)

// ChainIssueKind names what is wrong with a served chain.
type ChainIssueKind string

// Served chain issues.
const (
	ChainEmpty               ChainIssueKind = "empty"
	ChainWrongOrder          ChainIssueKind = "wrong_order"          // an issuer is served before the certificate it signed, or not right after it
	ChainExtraCert           ChainIssueKind = "extra_cert"           // a served certificate is not on the path from the leaf
	ChainDuplicate           ChainIssueKind = "duplicate"            // the same certificate is served twice
	ChainMissingIntermediate ChainIssueKind = "missing_intermediate" // the path stops at a certificate whose issuer is neither served nor in the trust bundle
	ChainUntrusted           ChainIssueKind = "untrusted"            // the path ends at a CA (or a name of one) the bundle does not hold with that key
)

// ChainIssue is one problem with a served chain. Index is the position in the served chain of
// the certificate concerned.
type ChainIssue struct {
	Kind    ChainIssueKind `json:"kind"`
	Index   int            `json:"index"`
	Message string         `json:"message"`
}

// ChainReport is what CheckServedChain found.
type ChainReport struct {
	Issues []ChainIssue `json:"issues,omitempty"`
	// Path is the positions in the served chain of the certificates from the leaf up, each issued
	// by the next, whatever order they were served in.
	Path []int `json:"path"`
	// Verify is the full verification against the roots at the given time, when roots were given.
	// Expiry is left to the EXPIRED checks, so it does not make the report fail.
	Verify *VerifyResult `json:"-"`
}

// OK reports whether the chain has no issue.
func (r ChainReport) OK() bool { return len(r.Issues) == 0 }

// Has reports whether the report has an issue of kind k.
func (r ChainReport) Has(k ChainIssueKind) bool {
	for _, is := range r.Issues {
		if is.Kind == k {
			return true
		}
	}
	return false
}

// String is the issues on one line, for a finding's message.
func (r ChainReport) String() string {
	if r.OK() {
		return "ok"
	}
	parts := make([]string, len(r.Issues))
	for i, is := range r.Issues {
		parts[i] = is.Message
	}
	return strings.Join(parts, "; ")
}

// CheckServedChain judges a chain as a TLS server sent it (leaf first). It finds the path from
// the leaf through the served certificates by signature, then reports certificates served out of
// order, served twice or not on that path. With roots, it also reports a path that stops short
// of them (a missing intermediate) or ends at a CA they do not hold (untrusted). Without roots it
// judges only structure: a chain that ends at an intermediate is normal, since servers need not
// send the root.
//
// Time is not judged here (EXPIRED findings cover every certificate of a chain); the full
// verification at `at` is returned in the report for callers that want it.
func CheckServedChain(chain []*x509.Certificate, roots []*x509.Certificate, at time.Time) ChainReport {
	return checkServedChain(chain, roots, &at)
}

// checkServedChain is CheckServedChain; with at nil it leaves out the full verification, which
// no issue depends on (ChainCache).
func checkServedChain(chain []*x509.Certificate, roots []*x509.Certificate, at *time.Time) ChainReport {
	var rep ChainReport
	chain = nonNil(chain)
	if len(chain) == 0 {
		rep.Issues = append(rep.Issues, ChainIssue{Kind: ChainEmpty, Index: -1, Message: "no certificate served"})
		return rep
	}
	roots = nonNil(roots)

	// Duplicates first, so that the path search sees each certificate once.
	first := map[string]int{}
	dup := map[int]bool{}
	for i, c := range chain {
		fp := Fingerprint(c)
		if j, ok := first[fp]; ok {
			dup[i] = true
			rep.Issues = append(rep.Issues, ChainIssue{Kind: ChainDuplicate, Index: i,
				Message: fmt.Sprintf("certificate %d (%s) is served again at position %d", j, name(c), i)})
			continue
		}
		first[fp] = i
	}

	// Walk up from the leaf, taking the issuer from anywhere in the served chain.
	start := findLeaf(chain, dup)
	used := map[int]bool{start: true}
	rep.Path = []int{start}
	cur := chain[start]
	for len(rep.Path) < len(chain) && !SelfSigned(cur) {
		next := -1
		for i, c := range chain {
			if !used[i] && !dup[i] && IssuedBy(cur, c) {
				next = i
				break
			}
		}
		if next < 0 {
			break
		}
		used[next] = true
		rep.Path = append(rep.Path, next)
		cur = chain[next]
	}

	for pos, idx := range rep.Path {
		if idx != pos {
			rep.Issues = append(rep.Issues, ChainIssue{Kind: ChainWrongOrder, Index: idx,
				Message: fmt.Sprintf("%s is served at position %d but belongs at position %d (each certificate must be followed by its issuer)",
					name(chain[idx]), idx, pos)})
			break
		}
	}
	for i, c := range chain {
		if !used[i] && !dup[i] {
			rep.Issues = append(rep.Issues, ChainIssue{Kind: ChainExtraCert, Index: i,
				Message: fmt.Sprintf("%s at position %d is not on the path from the leaf (unrelated certificate)", name(c), i)})
		}
	}

	if len(roots) == 0 {
		return rep
	}
	if at != nil {
		others := make([]*x509.Certificate, 0, len(chain)-1)
		for i, c := range chain {
			if i != start {
				others = append(others, c)
			}
		}
		v := Verify(chain[start], others, roots, *at, x509.ExtKeyUsageAny)
		rep.Verify = &v
	}
	top := chain[rep.Path[len(rep.Path)-1]]
	if anchored(top, roots) {
		return rep
	}
	if SelfSigned(top) || nameInRoots(top.RawIssuer, roots) {
		rep.Issues = append(rep.Issues, ChainIssue{Kind: ChainUntrusted, Index: rep.Path[len(rep.Path)-1],
			Message: fmt.Sprintf("the chain ends at %s, issued by %q, which the trust bundle does not hold (with that key)",
				name(top), top.Issuer.String())})
		return rep
	}
	rep.Issues = append(rep.Issues, ChainIssue{Kind: ChainMissingIntermediate, Index: rep.Path[len(rep.Path)-1],
		Message: fmt.Sprintf("the chain stops at %s; its issuer %q is neither served nor in the trust bundle (missing intermediate)",
			name(top), top.Issuer.String())})
	return rep
}

// findLeaf returns the position of the leaf: 0, as TLS requires, unless the certificate there
// issued another served certificate, in which case the served order is upside down and the leaf
// is the lowest certificate that issued nothing else (a non-CA one if there is a choice).
func findLeaf(chain []*x509.Certificate, dup map[int]bool) int {
	issuesOther := func(i int) bool {
		for j, c := range chain {
			if j != i && !dup[j] && !bytes.Equal(c.Raw, chain[i].Raw) && IssuedBy(c, chain[i]) {
				return true
			}
		}
		return false
	}
	if !issuesOther(0) {
		return 0
	}
	best := 0
	for i, c := range chain {
		if dup[i] || issuesOther(i) {
			continue
		}
		if !c.IsCA {
			return i
		}
		if best == 0 {
			best = i
		}
	}
	return best
}

// anchored reports whether c is in roots or issued by one of them.
func anchored(c *x509.Certificate, roots []*x509.Certificate) bool {
	for _, r := range roots {
		if bytes.Equal(c.Raw, r.Raw) || IssuedBy(c, r) {
			return true
		}
	}
	return false
}

func nameInRoots(rawName []byte, roots []*x509.Certificate) bool {
	for _, r := range roots {
		if bytes.Equal(rawName, r.RawSubject) {
			return true
		}
	}
	return false
}

// name is how a certificate is named in messages: its subject CN, or the whole subject.
func name(c *x509.Certificate) string {
	if c.Subject.CommonName != "" {
		return fmt.Sprintf("%q", c.Subject.CommonName)
	}
	return fmt.Sprintf("%q", c.Subject.String())
}
