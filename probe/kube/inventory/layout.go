package inventory

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ParseLayout reads "cert=K,key=K,ca=K" (key and ca optional, in any order), or "ca=K" alone for a
// CA-only Secret, into a Layout (the --secret-layout flag).
func ParseLayout(s string) (Layout, error) {
	var l Layout
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		name, val = strings.TrimSpace(name), strings.TrimSpace(val)
		if !ok || val == "" {
			return Layout{}, fmt.Errorf("%q: want name=key", part)
		}
		if seen[name] {
			return Layout{}, fmt.Errorf("%s given twice", name)
		}
		seen[name] = true
		if msgs := validation.IsConfigMapKey(strings.ReplaceAll(val, "*", "x")); len(msgs) > 0 {
			return Layout{}, fmt.Errorf("%s=%q: not a Secret key: %s", name, val, strings.Join(msgs, "; "))
		}
		switch name {
		case "cert":
			l.Cert = val
		case "key":
			l.Key = val
		case "ca":
			l.CA = val
		default:
			return Layout{}, fmt.Errorf("%q: want cert, key or ca", name)
		}
	}
	switch {
	case l.Cert == "" && l.CA == "":
		return Layout{}, errors.New("cert=<key> is required, or ca=<key> alone for a CA-only Secret")
	case l.Cert == "" && l.Key != "":
		return Layout{}, errors.New("key=<key> needs cert=<key>")
	}
	certStars, keyStars := strings.Count(l.Cert, "*"), strings.Count(l.Key, "*")
	if certStars > 1 || keyStars > 1 || strings.Contains(l.CA, "*") {
		return Layout{}, errors.New("at most one * in cert and key, none in ca")
	}
	if l.Key != "" && certStars != keyStars {
		return Layout{}, errors.New("cert and key must both have a * or neither")
	}
	return l, nil
}
