package audit

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const findingsDoc = "../docs/findings.md"

// docFields are the labels every code's section must carry, in the form "- **Label:** text".
var docFields = []string{"Severity", "Meaning", "Evidence", "Confirm", "Fix", "Views"}

var (
	codeHeadingRE = regexp.MustCompile(`^## ([A-Z][A-Z0-9_]*)\s*$`)
	fieldRE       = regexp.MustCompile(`^- \*\*([A-Za-z ]+):\*\*\s*(.*)$`)
)

type docSection struct {
	code   string
	line   int
	fields map[string]string // label → first line of text
}

// parseFindingsDoc reads the "## CODE" sections of docs/findings.md. A "## " heading that is
// not a code (e.g. "## Notes") ends the previous section and is otherwise ignored.
func parseFindingsDoc(data []byte) ([]docSection, error) {
	var out []docSection
	var cur *docSection
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			cur = nil
			if m := codeHeadingRE.FindStringSubmatch(line); m != nil {
				out = append(out, docSection{code: m[1], line: n, fields: map[string]string{}})
				cur = &out[len(out)-1]
			}
			continue
		}
		if cur == nil {
			continue
		}
		if m := fieldRE.FindStringSubmatch(line); m != nil {
			if _, dup := cur.fields[m[1]]; dup {
				return nil, fmt.Errorf("line %d: %s has %q twice", n, cur.code, m[1])
			}
			cur.fields[m[1]] = m[2]
		}
	}
	return out, sc.Err()
}

func TestFindingsDocCoversAllCodes(t *testing.T) {
	data, err := os.ReadFile(findingsDoc)
	if err != nil {
		t.Fatalf("read %s: %v", findingsDoc, err)
	}
	sections, err := parseFindingsDoc(data)
	if err != nil {
		t.Fatalf("parse %s: %v", findingsDoc, err)
	}

	known := map[string]bool{}
	for _, c := range AllCodes {
		known[string(c)] = true
	}
	documented := map[string]int{}
	var order []string
	for _, s := range sections {
		if prev, dup := documented[s.code]; dup {
			t.Errorf("%s:%d: %s is documented twice (first at line %d)", findingsDoc, s.line, s.code, prev)
		}
		documented[s.code] = s.line
		order = append(order, s.code)
		if !known[s.code] {
			t.Errorf("%s:%d: %s is documented but is not in audit.AllCodes", findingsDoc, s.line, s.code)
		}
		for _, f := range docFields {
			if strings.TrimSpace(s.fields[f]) == "" {
				t.Errorf("%s:%d: %s lacks a \"- **%s:** ...\" line", findingsDoc, s.line, s.code, f)
			}
		}
		if sev := s.fields["Severity"]; sev != "" && !mentionsSeverity(sev) {
			t.Errorf("%s:%d: %s severity %q names none of info, warning, critical", findingsDoc, s.line, s.code, sev)
		}
	}
	var want []string
	for _, c := range AllCodes {
		want = append(want, string(c))
		if _, ok := documented[string(c)]; !ok {
			t.Errorf("%s: code %s is in audit.AllCodes but has no \"## %s\" section", findingsDoc, c, c)
		}
	}
	if !t.Failed() {
		if diff := cmp.Diff(want, order); diff != "" {
			t.Errorf("%s documents the codes in a different order from audit.AllCodes: -AllCodes +doc:\n%s", findingsDoc, diff)
		}
	}
}

func mentionsSeverity(s string) bool {
	for _, v := range []Severity{Info, Warning, Critical} {
		if regexp.MustCompile(`\b` + v.String() + `\b`).MatchString(s) {
			return true
		}
	}
	return false
}

// TestParseFindingsDoc makes sure the parser the coverage test relies on can tell a good doc from
// a broken one, so a parser bug cannot make the coverage test pass vacuously.
func TestParseFindingsDoc(t *testing.T) {
	tests := map[string]struct {
		reason  string
		doc     string
		want    []string // codes found
		wantErr bool
	}{
		"TwoSections": {
			reason: "code headings start sections; other headings do not",
			doc:    "# Findings\n## EXPIRED\n- **Severity:** critical\n## Notes\n- **Severity:** x\n## UNREACHABLE\n",
			want:   []string{"EXPIRED", "UNREACHABLE"},
		},
		"LowerCaseHeading": {
			reason: "a heading that is not an upper-case code is not a section",
			doc:    "## expired\n",
		},
		"DuplicateField": {
			reason:  "a field given twice in one section is an error",
			doc:     "## EXPIRED\n- **Fix:** a\n- **Fix:** b\n",
			wantErr: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseFindingsDoc([]byte(tc.doc))
			if (err != nil) != tc.wantErr {
				t.Fatalf("%s: err = %v, wantErr %v", tc.reason, err, tc.wantErr)
			}
			var codes []string
			for _, s := range got {
				codes = append(codes, s.code)
			}
			if diff := cmp.Diff(tc.want, codes); diff != "" {
				t.Errorf("%s: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
	got, err := parseFindingsDoc([]byte("## EXPIRED\n- **Severity:** critical\n- **Fix:** renew it\n"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"Severity": "critical", "Fix": "renew it"}, got[0].fields); diff != "" {
		t.Errorf("fields: -want +got:\n%s", diff)
	}
}
