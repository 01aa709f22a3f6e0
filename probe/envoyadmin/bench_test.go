package envoyadmin

import (
	"os"
	"testing"
)

// Parser benchmarks on real Envoy 1.40.0 recordings: the cost of one admin poll per Envoy,
// excluding the network.
func benchParse(b *testing.B, file string, parse func([]byte) error) {
	data, err := os.ReadFile("testdata/real-1.40.0/" + file)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseCerts(b *testing.B) {
	benchParse(b, "certs.json", func(d []byte) error { _, err := ParseCerts(d); return err })
}

func BenchmarkParseConfigDump(b *testing.B) {
	benchParse(b, "config_dump.json", func(d []byte) error { _, _, err := ParseConfigDump(d); return err })
}

func BenchmarkParseStats(b *testing.B) {
	benchParse(b, "stats.txt", func(d []byte) error { _, err := ParseStats(d); return err })
}
