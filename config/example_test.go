package config

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEExample keeps the example in the README valid: examples/certdrift.yaml must parse, and
// the README must still show exactly that file.
func TestREADMEExample(t *testing.T) {
	data, err := os.ReadFile("../examples/certdrift.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(data)
	if err != nil {
		t.Fatalf("examples/certdrift.yaml: %v", err)
	}
	if len(c.Desired) != 3 || len(c.Envoys) != 1 || len(c.Pairings) != 1 {
		t.Errorf("example has %d desired, %d envoys, %d pairings; the README describes 3, 1, 1", len(c.Desired), len(c.Envoys), len(c.Pairings))
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```yaml\n"+string(data)+"```") {
		t.Errorf("README.md no longer shows examples/certdrift.yaml verbatim: update one from the other")
	}
}
