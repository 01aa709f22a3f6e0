// Package docs holds no code: its test keeps the user documentation's links working. Every
// relative link and image in README.md, docs/*.md and examples/**/*.md must name a file or
// directory of this repository, and a #fragment must name a heading of the page it points to.
package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, seen from this package's directory (where go test runs).
const root = ".."

// readmeMaxLines is the README's budget (issue 19): it is for users, the rest lives in docs/.
const readmeMaxLines = 150

// promised are pages that other work in flight writes and that the docs already link to. A
// missing one is tolerated and logged; once it exists, the entry must go, so that the list
// cannot hide a broken link for long.
var promised = map[string]string{}

// pages are the Markdown files whose links are checked, relative to root.
func pages(t *testing.T) []string {
	t.Helper()
	out := []string{"README.md"}
	for _, glob := range []string{"docs/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
	}
	err := filepath.WalkDir(filepath.Join(root, "examples"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// linkRE matches an inline link or image target: [text](target) or ![alt](target), with an
// optional "title" after the target.
var linkRE = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// inlineCodeRE matches `code` spans, whose brackets are not links.
var inlineCodeRE = regexp.MustCompile("`[^`]*`")

// page is one Markdown file: its links with their line numbers, and the anchors of its headings.
type page struct {
	links   []link
	anchors map[string]bool
}

type link struct {
	line   int
	target string
}

func parse(text string) page {
	p := page{anchors: map[string]bool{}}
	seen := map[string]int{}
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if h, ok := heading(line); ok {
			a := slug(h)
			// GitHub numbers repeated headings: x, x-1, x-2.
			if n := seen[a]; n > 0 {
				p.anchors[fmt.Sprintf("%s-%d", a, n)] = true
			} else {
				p.anchors[a] = true
			}
			seen[a]++
		}
		for _, m := range linkRE.FindAllStringSubmatch(inlineCodeRE.ReplaceAllString(line, ""), -1) {
			p.links = append(p.links, link{line: i + 1, target: m[1]})
		}
	}
	return p
}

func heading(line string) (string, bool) {
	n := len(line) - len(strings.TrimLeft(line, "#"))
	if n == 0 || n > 6 || !strings.HasPrefix(line[n:], " ") {
		return "", false
	}
	return strings.TrimSpace(line[n:]), true
}

// slug is GitHub's heading anchor: lower case, letters, digits, '-' and '_' kept, spaces become
// '-', everything else dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// schemeRE matches a target with a URL scheme (https:, mailto:): not a file of the repository.
var schemeRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

func external(target string) bool { return schemeRE.MatchString(target) }

// check returns what is wrong with the links of the page at rel (relative to root).
func check(rel string, p page, read func(string) (page, error)) []string {
	var problems []string
	for _, l := range p.links {
		if external(l.target) {
			continue
		}
		where := fmt.Sprintf("%s:%d: %s", rel, l.line, l.target)
		file, frag, _ := strings.Cut(l.target, "#")
		if file == "" {
			if !p.anchors[strings.ToLower(frag)] {
				problems = append(problems, fmt.Sprintf("%s: %s has no heading with the anchor #%s", where, rel, frag))
			}
			continue
		}
		target := filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(rel), file)))
		if target == ".." || strings.HasPrefix(target, "../") || filepath.IsAbs(file) {
			problems = append(problems, where+": points outside the repository")
			continue
		}
		info, err := os.Stat(filepath.Join(root, target))
		if err != nil {
			if _, ok := promised[target]; ok && os.IsNotExist(err) {
				continue
			}
			problems = append(problems, where+": no such file or directory")
			continue
		}
		if frag == "" || info.IsDir() || !strings.HasSuffix(target, ".md") {
			continue
		}
		tp, err := read(target)
		if err != nil {
			problems = append(problems, where+": "+err.Error())
			continue
		}
		if !tp.anchors[strings.ToLower(frag)] {
			problems = append(problems, fmt.Sprintf("%s: %s has no heading with the anchor #%s", where, target, frag))
		}
	}
	return problems
}

func TestDocLinks(t *testing.T) {
	cache := map[string]page{}
	read := func(rel string) (page, error) {
		if p, ok := cache[rel]; ok {
			return p, nil
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return page{}, err
		}
		p := parse(string(b))
		cache[rel] = p
		return p, nil
	}
	files := pages(t)
	if len(files) < 5 {
		t.Fatalf("found only %v: the page list is wrong", files)
	}
	links := 0
	for _, rel := range files {
		p, err := read(rel)
		if err != nil {
			t.Fatal(err)
		}
		links += len(p.links)
		for _, problem := range check(rel, p, read) {
			t.Error(problem)
		}
		b, _ := os.ReadFile(filepath.Join(root, rel))
		// A pointer out of the tree, linked or not, is a dead end for a reader of the repository.
		if strings.Contains(string(b), "../shared/") {
			t.Errorf("%s refers to ../shared/, which is not in the repository", rel)
		}
	}
	if links < 20 {
		t.Errorf("found only %d links in %d pages: the link pattern is wrong", links, len(files))
	}
	for target, why := range promised {
		if _, err := os.Stat(filepath.Join(root, target)); err == nil {
			t.Errorf("%s exists now: remove it from promised in docs/links_test.go", target)
		} else {
			t.Logf("%s does not exist yet (%s); links to it are not checked", target, why)
		}
	}
}

// TestREADMELength keeps the README a page for users.
func TestREADMELength(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move detail to docs/", n, readmeMaxLines)
	}
}

// TestCheckCatchesBrokenLinks is the control: the checker must report each kind of bad link.
func TestCheckCatchesBrokenLinks(t *testing.T) {
	read := func(rel string) (page, error) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		return parse(string(b)), err
	}
	// Existence is checked against the real tree (docs/findings.md and examples/ exist).
	src := strings.Join([]string{
		"[ok](findings.md)",
		"[ok anchor](findings.md#stale_loaded)",
		"[bad anchor](findings.md#stale-loaded-typo)",
		"[ok dir](../examples/)",
		"[missing](nope.md)",
		"[outside](../../shared/DESIGN.md)",
		"[web](https://example.com/x)",
		"`[in code](nope.md)`",
		"```",
		"[in a block](nope.md)",
		"```",
		"[own anchor](#local-heading)",
		"[bad own anchor](#no-such)",
		"## Local heading",
	}, "\n")
	got := check("docs/page.md", parse(src), read)
	want := []string{
		"docs/page.md:3: findings.md#stale-loaded-typo: docs/findings.md has no heading with the anchor #stale-loaded-typo",
		"docs/page.md:5: nope.md: no such file or directory",
		"docs/page.md:6: ../../shared/DESIGN.md: points outside the repository",
		"docs/page.md:13: #no-such: docs/page.md has no heading with the anchor #no-such",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("check reported:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if a := parse("# Target page\n\n## Section: `one` two\n\n## Section: `one` two\n").anchors; !a["section-one-two"] || !a["section-one-two-1"] || !a["target-page"] {
		t.Errorf("anchors of a page with a repeated heading: %v", a)
	}
}
