package collector

import (
	"maps"
	"strings"
	"testing"

	"github.com/certdrift/certdrift/audit"
	"github.com/certdrift/certdrift/probe/envoystate"
	"github.com/certdrift/certdrift/test/certs"
)

// TestLoadedSourceByFile: a config_dump secret bound by the certificate file it reads, not by its
// name (a binding by mount path has no SDS name), is labelled with its source, as the audit
// judges it (audit.Binding.Loads); one no binding holds is not.
func TestLoadedSourceByFile(t *testing.T) {
	leaf := certs.NewCA(t).Leaf(t)
	snap := &envoystate.Snapshot{Secrets: []envoystate.Secret{
		{Name: "xds_certificate", State: envoystate.SecretActive, HasCertificate: true, CertFile: "/certs/tls.crt", Chain: leaf.Chain()},
		{Name: "other", State: envoystate.SecretActive, HasCertificate: true, CertFile: "/other/tls.crt", Chain: leaf.Chain()},
	}}
	bs := []audit.Binding{{Envoy: "gw/proxy-0", Source: "gw/envoy", File: "/certs/./tls.crt", Origin: "path"}}
	var rs rowSet
	newCertSeries(&rs).loaded(snap, "gw", "gw/proxy-0", bs, nil)
	got := map[string]bool{} // location → labelled with source gw/envoy
	for _, r := range rs.rows {
		if r.f != certInfo {
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(string(r.text)), "\n") {
			loc := line[strings.Index(line, `location="`)+len(`location="`):]
			got[loc[:strings.IndexByte(loc, '"')]] = strings.Contains(line, `source="gw/envoy"`)
		}
	}
	if want := map[string]bool{"xds_certificate": true, "other": false}; !maps.Equal(got, want) {
		t.Errorf("loaded certificate_info by location, labelled with the source: %v, want %v", got, want)
	}
}
