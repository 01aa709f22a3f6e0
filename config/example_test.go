package config

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEExample keeps the annotated example of every field valid: examples/certdrift.yaml must
// parse, and the README, which points at it instead of repeating it, must still do so.
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
		t.Errorf("examples/certdrift.yaml has %d desired, %d envoys, %d pairings; want 3, 1, 1 (each kind of desired source, an Envoy, a pairing)", len(c.Desired), len(c.Envoys), len(c.Pairings))
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "(examples/certdrift.yaml)") {
		t.Errorf("README.md no longer links examples/certdrift.yaml")
	}
}
