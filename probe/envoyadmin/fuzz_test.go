package envoyadmin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/envoystate"
)

// addSeeds adds every recorded body matching the globs, so the fuzzers start from real shapes.
// The checked-in corpora under testdata/fuzz add small hand-made odd cases.
func addSeeds(f *testing.F, globs ...string) {
	for _, g := range globs {
		paths, err := filepath.Glob(filepath.Join("testdata", g))
		if err != nil || len(paths) == 0 {
			f.Fatalf("no seeds for %q (err %v)", g, err)
		}
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
}

func FuzzParseCerts(f *testing.F) {
	addSeeds(f, "fixtures/certs_*", "real-*/certs.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		ctxs, _ := ParseCerts(data)
		for _, c := range ctxs {
			for _, d := range append(c.CA, c.Chain...) {
				n, err := pki.ParseSerial(d.SerialText)
				if (err == nil) != (d.Serial != nil) || (err == nil && n.Cmp(d.Serial) != 0) {
					t.Fatalf("serial %q parsed as %v, pki.ParseSerial says %v, %v", d.SerialText, d.Serial, n, err)
				}
				// No silent zero values: what did not read is said.
				if (d.Serial == nil || d.Expiration.IsZero()) && d.Err == nil {
					t.Fatalf("certificate %+v: serial or expiration missing and no Err", d)
				}
			}
		}
	})
}

func FuzzParseConfigDump(f *testing.F) {
	addSeeds(f, "fixtures/config_dump_*", "real-*/config_dump_mask_*.json", "real-*/config_dump_resource_*.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		secrets, listeners, skipped, err := ParseConfigDumpDetail(data)
		if err != nil && (len(secrets) > 0 || len(listeners) > 0 || len(skipped) > 0) {
			t.Fatalf("fatal error %v but also results", err)
		}
		for _, s := range secrets {
			if s.State != envoystate.SecretStatic && s.State != envoystate.SecretActive && s.State != envoystate.SecretWarming {
				t.Fatalf("secret %q has state %q", s.Name, s.State)
			}
			// Something there that was not read is said.
			if s.HasCertificate && len(s.Chain) == 0 && s.CertFile == "" && s.ChainErr == nil {
				t.Fatalf("secret %q: a certificate with no chain, no file and no ChainErr", s.Name)
			}
		}
		for _, l := range listeners {
			inline := 0
			for _, f := range l.CertFiles {
				if f == "<inline>" {
					inline++
				}
			}
			if inline > len(l.InlineCerts) && l.InlineCertsErr == nil {
				t.Fatalf("chain %q: %d inline certificates, %d read, no InlineCertsErr", l.FilterChain, inline, len(l.InlineCerts))
			}
		}
		for _, p := range problems(secrets, listeners, skipped) {
			if strings.Contains(p, "PRIVATE KEY") {
				t.Fatalf("problem %q quotes key material", p)
			}
		}
	})
}

func FuzzParseStats(f *testing.F) {
	addSeeds(f, "fixtures/stats_*", "real-*/stats_filtered.txt")
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParseStats(data)
		if err == nil && st.Counters == nil {
			t.Fatal("nil Counters without error")
		}
		// The helpers must cope with whatever names were read.
		st.KeyRotationFailed()
		st.SDSUpdates()
		st.SSLHandshakes()
		st.SSLContextUpdatesBySDS()
		st.CertExpirations()
		st.DaysUntilFirstCertExpiring()
	})
}
