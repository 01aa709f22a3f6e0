package envoytest

import "strings"

// Redacted replaces anything that may be private key material in s: every line that mentions
// "PRIVATE KEY", and every line inside a PEM private-key block. Envoy should never log keys at
// info level, but a config echoed in an error message could carry an inline key, and test output
// ends up in CI logs.
func Redacted(s string) string {
	if !strings.Contains(s, "PRIVATE KEY") {
		return s
	}
	lines := strings.Split(s, "\n")
	inKey := false
	for i, l := range lines {
		switch {
		case strings.Contains(l, "PRIVATE KEY"):
			// A BEGIN line opens a block unless its END is on the same line (escaped "\n").
			inKey = strings.Contains(l, "-BEGIN") && !strings.Contains(l, "-END")
			lines[i] = "[line redacted: private key material]"
		case inKey:
			lines[i] = "[line redacted: private key material]"
		}
	}
	return strings.Join(lines, "\n")
}
