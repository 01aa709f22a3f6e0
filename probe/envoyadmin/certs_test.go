package envoyadmin

import (
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/probe/envoystate"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read testdata: %v (fixtures are copied from /work/shared/fixtures/envoy; real-* are made by testdata/record/record.sh)", err)
	}
	return b
}

// stripHeader drops the "# ..." provenance lines the fixture collectors put above verbatim data.
func stripHeader(b []byte) []byte {
	lines := strings.SplitAfter(string(b), "\n")
	i := 0
	for i < len(lines) && strings.HasPrefix(lines[i], "#") {
		i++
	}
	return []byte(strings.Join(lines[i:], ""))
}

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func hexInt(s string) *big.Int {
	n, ok := new(big.Int).SetString(s, 16)
	if !ok {
		panic(s)
	}
	return n
}

// certCmp compares big.Ints by value and ignores nothing else.
var certCmp = cmp.Comparer(func(a, b *big.Int) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Cmp(b) == 0
})

func TestParseCertsFixtures(t *testing.T) {
	spireCA := envoystate.CertDetail{
		Path: "magedu.com: <inline>", Serial: big.NewInt(0), SerialText: "0",
		URIs:      []string{"spiffe://magedu.com"},
		ValidFrom: ts("2021-11-08T03:46:57Z"), Expiration: ts("2021-11-09T03:47:07Z"),
	}
	cases := map[string]struct {
		reason string
		file   string
		want   []envoystate.TLSContext
	}{
		"AppMeshSPIRESDS": {
			reason: "inline SDS paths, CA serial 0, a 1h leaf with days_until_expiration 0",
			file:   "fixtures/certs_appmesh_spire_sds_2020.json",
			want: []envoystate.TLSContext{{
				CA: []envoystate.CertDetail{{
					Path: "<inline>", Serial: big.NewInt(0), SerialText: "0",
					URIs:      []string{"spiffe://howto-k8s-mtls-sds-based.com"},
					ValidFrom: ts("2020-11-11T20:49:06Z"), Expiration: ts("2020-11-12T20:49:16Z"),
				}},
				Chain: []envoystate.CertDetail{{
					Path: "<inline>", Serial: hexInt("7b177c736290d0fe5527a7ccf0ecee4c"), SerialText: "7b177c736290d0fe5527a7ccf0ecee4c",
					URIs:      []string{"spiffe://howto-k8s-mtls-sds-based.com/front"},
					ValidFrom: ts("2020-11-11T23:19:45Z"), Expiration: ts("2020-11-12T00:19:55Z"),
				}},
			}},
		},
		"AppMeshNoCerts": {
			reason: "before any secret arrived: an empty list, not an error",
			file:   "fixtures/certs_appmesh_no_certs_2020.json",
		},
		"ContextWithoutCerts": {
			reason: "a TLS context with empty arrays is still one context",
			file:   "fixtures/certs_envoy_test_context_without_certs.json",
			want:   []envoystate.TLSContext{{}},
		},
		"FileBasedFrontProxy": {
			reason: "static file certificate: the path is the file name, SANs empty",
			file:   "fixtures/certs_file_based_front_proxy_2021.json",
			want: []envoystate.TLSContext{{
				Chain: []envoystate.CertDetail{{
					Path:   "/etc/envoy/certs/front-proxy-crt.pem",
					Serial: hexInt("7d6d5bdf430762049f53980908a16367255627ca"), SerialText: "7d6d5bdf430762049f53980908a16367255627ca",
					ValidFrom: ts("2021-03-17T12:32:14Z"), Expiration: ts("2031-03-15T12:32:14Z"), DaysUntilExpiration: 3649,
				}},
			}},
		},
		"SPIFFEValidatorDuplicates": {
			reason: "Envoy 1.20 + SPIRE: trust-domain CA paths, the same CA in two contexts",
			file:   "fixtures/certs_spire_spiffe_validator_envoy1.20_web.json",
			want: []envoystate.TLSContext{
				{CA: []envoystate.CertDetail{spireCA}},
				{CA: []envoystate.CertDetail{spireCA}, Chain: []envoystate.CertDetail{{
					Path: "<inline>", Serial: hexInt("a3dc15ccfcf4a934ea0945fa2832a79a"), SerialText: "a3dc15ccfcf4a934ea0945fa2832a79a",
					URIs:      []string{"spiffe://magedu.com/web-server"},
					ValidFrom: ts("2021-11-08T03:47:50Z"), Expiration: ts("2021-11-08T04:48:00Z"),
				}}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseCerts(readTestdata(t, tc.file))
			if err != nil {
				t.Fatalf("%s: ParseCerts: %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, got, certCmp); diff != "" {
				t.Errorf("%s: ParseCerts (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestParseCertsFragmentIsAClearError(t *testing.T) {
	// The 2019 issue excerpt starts with "..." and is cut mid-field: not JSON at all.
	got, err := ParseCerts(stripHeader(readTestdata(t, "fixtures/certs_issue_envoy6315_sds_fragment_2019.txt")))
	if err == nil {
		t.Fatalf("ParseCerts(fragment) = %d contexts, want an error", len(got))
	}
	if !strings.Contains(err.Error(), "expected a JSON object") {
		t.Errorf("error %q does not say what is wrong", err)
	}
}

func TestParseCertsFragmentRepaired(t *testing.T) {
	// The fragment's complete entries, wrapped back into a document: the 1982 CA expiration (an
	// old Envoy's overflow) is kept as printed next to its 36196 days; callers judge Expiration.
	frag := string(stripHeader(readTestdata(t, "fixtures/certs_issue_envoy6315_sds_fragment_2019.txt")))
	frag = strings.TrimPrefix(strings.TrimSpace(frag), "...")
	end := strings.LastIndex(frag, "\n  },")
	doc := `{"certificates": [{` + frag[:end] + "}]}"
	got, err := ParseCerts([]byte(doc))
	if err != nil {
		t.Fatalf("ParseCerts(repaired fragment): %v", err)
	}
	if len(got) != 1 || len(got[0].CA) != 1 || len(got[0].Chain) != 1 {
		t.Fatalf("got %+v, want one context with one CA and one leaf", got)
	}
	ca, leaf := got[0].CA[0], got[0].Chain[0]
	if !ca.Expiration.Equal(ts("1982-03-19T15:43:17Z")) || ca.DaysUntilExpiration != 36196 {
		t.Errorf("CA expiration %v / %d days, want the printed 1982 date and 36196", ca.Expiration, ca.DaysUntilExpiration)
	}
	if leaf.Serial == nil || leaf.Serial.Cmp(hexInt("287be20c0bc92ce9d87b5f5f396f2ef1d7670")) != 0 {
		t.Errorf("leaf serial %v, want 0x0287be... as an integer", leaf.Serial)
	}
	if diff := cmp.Diff([]string{"my-service-1"}, leaf.URIs); diff != "" {
		t.Errorf("leaf URIs (-want +got):\n%s", diff)
	}
}

func TestParseCertsReal(t *testing.T) {
	for _, v := range realVersions {
		t.Run(v, func(t *testing.T) {
			got, err := ParseCerts(readTestdata(t, "real-"+v+"/certs.json"))
			if err != nil {
				t.Fatalf("ParseCerts: %v", err)
			}
			// record.sh: inline static secret (serial 7f), file SDS (0a0b0c, CA abcdef01, shown
			// as <inline> because Envoy reads SDS files into memory), static files (0102).
			bySerial := map[string]envoystate.CertDetail{}
			for _, c := range got {
				for _, d := range append(append([]envoystate.CertDetail{}, c.Chain...), c.CA...) {
					bySerial[d.Serial.Text(16)+" "+filepath.Base(d.Path)] = d
				}
			}
			want := map[string][]string{
				"7f <inline>":       {"inline.example.com"},
				"a0b0c <inline>":    {"sds.example.com", "*.sds.example.com"},
				"abcdef01 <inline>": nil,
				"abcdef01 ca.crt":   nil,
				"102 tls.crt":       {"static.example.com"},
			}
			for k, dns := range want {
				d, ok := bySerial[k]
				if !ok {
					t.Errorf("no certificate %q in %v", k, keysOf(bySerial))
					continue
				}
				if diff := cmp.Diff(dns, d.DNSNames); diff != "" {
					t.Errorf("%s DNS names (-want +got):\n%s", k, diff)
				}
				if d.Expiration.Sub(d.ValidFrom) < 24*time.Hour {
					t.Errorf("%s: validity %v..%v too short for record.sh's certificates", k, d.ValidFrom, d.Expiration)
				}
			}
			if d := bySerial["a0b0c <inline>"]; len(d.URIs) != 1 || d.URIs[0] != "spiffe://example.com/ns/default/sa/sds" {
				t.Errorf("SDS leaf URIs = %v", d.URIs)
			}
			if d := bySerial["102 tls.crt"]; len(d.IPAddresses) != 1 || d.IPAddresses[0] != "127.0.0.1" {
				t.Errorf("static leaf IPs = %v", d.IPAddresses)
			}
		})
	}
}

var realVersions = []string{"1.40.0", "1.36.2"}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// certProblems lists the errors on contexts and their certificates.
func certProblems(ctxs []envoystate.TLSContext) []string {
	var out []string
	for _, c := range ctxs {
		if c.Err != nil {
			out = append(out, c.Err.Error())
		}
		for _, d := range append(append([]envoystate.CertDetail(nil), c.CA...), c.Chain...) {
			if d.Err != nil {
				out = append(out, d.Err.Error())
			}
		}
	}
	return out
}

func TestParseCertsHostile(t *testing.T) {
	cases := map[string]struct {
		body    string
		wantErr string // substring; "" means no error
		want    int
	}{
		"Empty":              {body: "", wantErr: "empty body"},
		"HTML":               {body: "<html><body>admin</body></html>", wantErr: "expected a JSON object"},
		"Array":              {body: "[]", wantErr: "expected a JSON object"},
		"WrongShape":         {body: `{"stats": []}`, wantErr: `no "certificates" field`},
		"CertificatesNotArr": {body: `{"certificates": {}}`, wantErr: "unexpected JSON shape"},
		"Truncated":          {body: `{"certificates": [{"ca_cert": [`, wantErr: "invalid JSON"},
		"EmptyObject":        {body: `{}`},
		"BadTimestampOnItsEntry": {
			body: `{"certificates": [{"cert_chain": [{"valid_from": "yesterday", "expiration_time": "2030-01-01T00:00:00Z"}]}, {"cert_chain": []}]}`,
			want: 2,
		},
		"BadEntryKept":         {body: `{"certificates": [5, {"cert_chain": []}]}`, want: 2},
		"UnknownFieldsIgnored": {body: `{"certificates": [{"cert_chain": [{"serial_number": "01", "new_field": {"x": 1}}]}], "extra": 1}`, want: 1},
		"BadSerialKeptAsText":  {body: `{"certificates": [{"cert_chain": [{"serial_number": "not-hex"}]}]}`, want: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseCerts([]byte(tc.body))
			if tc.wantErr == "" && err != nil {
				t.Fatalf("ParseCerts: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("ParseCerts error = %v, want one containing %q", err, tc.wantErr)
			}
			if len(got) != tc.want {
				t.Errorf("got %d contexts, want %d", len(got), tc.want)
			}
		})
	}
	got, _ := ParseCerts([]byte(`{"certificates": [{"cert_chain": [{"serial_number": "not-hex"}]}]}`))
	if d := got[0].Chain[0]; d.Serial != nil || d.SerialText != "not-hex" {
		t.Errorf("bad serial: Serial=%v SerialText=%q, want nil and the text kept", d.Serial, d.SerialText)
	}
}

// TestEveryFixtureThroughEveryParser feeds every recorded file to every parser: whatever a file
// is, each parser returns a result or an error, never a panic.
func TestEveryFixtureThroughEveryParser(t *testing.T) {
	paths, _ := filepath.Glob("testdata/fixtures/*")
	more, _ := filepath.Glob("testdata/real-*/*")
	paths = append(paths, more...)
	if len(paths) < 30 {
		t.Fatalf("found %d recorded files, want the 16 fixtures and the real recordings", len(paths))
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, body := range [][]byte{b, stripHeader(b)} {
			ParseCerts(body)
			ParseConfigDump(body)
			ParseStats(body)
			ParseListenerJSON(body)
			AdminAddressFromBootstrap(body)
			parseServerInfo(body)
		}
	}
}
