package config

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestCheckFile: the verdict `--config.check` prints, for each way a file can be right or wrong,
// in the mode it is checked for; a bad file's problems keep their line and field.
func TestCheckFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	onePairing := write("one.yaml", "pairings:\n- name: xds\n  bundle: {source: eg/envoy}\n  leaf: {source: eg/envoy-gateway}\n")
	mutual := write("mutual.yaml", "pairings:\n- name: xds\n  bundle: {source: eg/envoy}\n  leaf: {source: eg/envoy-gateway}\n  mutual: true\n")
	missing := filepath.Join(dir, "nope.yaml")
	good := filepath.Join("testdata", "good.yaml")
	cases := map[string]struct {
		reason  string
		path    string
		cluster bool
		want    Check
		summary string // for a valid file
		errText []string
	}{
		"GoodLocal": {
			reason: "a complete local file is counted",
			path:   good,
			want: Check{Valid: true, File: good, Mode: "local", DesiredSources: 2, Envoys: 1, Pairings: 1,
				Errors: []CheckError{}},
			summary: "config OK: 2 desired sources, 1 envoy",
		},
		"ClusterOnePairing": {
			reason:  "Kubernetes mode counts only pairings, singular for one",
			path:    onePairing,
			cluster: true,
			want:    Check{Valid: true, File: onePairing, Mode: "kubernetes", Pairings: 1, Errors: []CheckError{}},
			summary: "config OK (Kubernetes mode): 1 pairing",
		},
		"ClusterMutual": {
			reason:  "a mutual pairing is two one-way pairings once loaded",
			path:    mutual,
			cluster: true,
			want:    Check{Valid: true, File: mutual, Mode: "kubernetes", Pairings: 2, Errors: []CheckError{}},
			summary: "config OK (Kubernetes mode): 2 pairings",
		},
		"LocalFileInClusterMode": {
			reason:  "a local file is not a Kubernetes-mode file: desired and envoys are refused, and local source names in pairings",
			path:    good,
			cluster: true,
			want: Check{File: good, Mode: "kubernetes",
				Errors: []CheckError{{Line: 2, Field: "desired"}, {Line: 19, Field: "pairings[0].bundle.source"}, {Line: 20, Field: "pairings[0].leaf.source"}}},
			errText: []string{"desired and envoys are not used"},
		},
		"UnknownField": {
			reason:  "one problem keeps its line and field",
			path:    filepath.Join("testdata", "unknown_field.yaml"),
			want:    Check{File: filepath.Join("testdata", "unknown_field.yaml"), Mode: "local", Errors: []CheckError{{Line: 4, Column: 5, Field: "desired[0].cert_flie"}}},
			errText: []string{"cert_flie", "line 4"},
		},
		"ThreeErrors": {
			reason: "every problem is listed, each at its line",
			path:   filepath.Join("testdata", "three_errors.yaml"),
			want: Check{File: filepath.Join("testdata", "three_errors.yaml"), Mode: "local", Errors: []CheckError{
				{Line: 8, Field: "envoys[0].endpoints[0].address"}, {Line: 10, Field: "policy.grace"}, {Line: 11, Field: "policy.max_bundle_cas"}}},
			errText: []string{"policy.grace", "policy.max_bundle_cas"},
		},
		"Missing": {
			reason:  "a file that cannot be read is one error with no place in a file",
			path:    missing,
			want:    Check{File: missing, Mode: "local", Errors: []CheckError{{Message: "nope.yaml"}}},
			errText: []string{"nope.yaml"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := CheckFile(tc.path, tc.cluster)
			if (got.Err == nil) != tc.want.Valid {
				t.Fatalf("%s: Valid %v with Err %v", tc.reason, got.Valid, got.Err)
			}
			// Messages are the loader's; the table checks where each problem is, and the text
			// only by its telling parts.
			opts := []cmp.Option{cmpopts.IgnoreFields(Check{}, "Err"), cmpopts.IgnoreFields(CheckError{}, "Column")}
			if tc.want.Valid || len(tc.want.Errors) > 1 || tc.want.Errors[0].Line > 0 {
				opts = append(opts, cmpopts.IgnoreFields(CheckError{}, "Message"))
			} else {
				opts = append(opts, cmp.Comparer(func(a, b CheckError) bool {
					return a.Line == b.Line && a.Field == b.Field && (strings.Contains(a.Message, b.Message) || strings.Contains(b.Message, a.Message))
				}))
			}
			if diff := cmp.Diff(tc.want, got, opts...); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
			for _, e := range got.Errors {
				if e.Message == "" {
					t.Errorf("%s: an error without a message: %+v", tc.reason, e)
				}
			}
			if tc.want.Valid {
				if s := got.Summary(); s != tc.summary {
					t.Errorf("%s: Summary %q, want %q", tc.reason, s, tc.summary)
				}
			}
			for _, w := range tc.errText {
				if !strings.Contains(got.Err.Error(), w) {
					t.Errorf("%s: Err %q lacks %q", tc.reason, got.Err, w)
				}
			}
		})
	}
}

// TestCheckJSON: the document `--config.check -o json` prints, with its field names (an
// interface for scripts), "errors" an empty list rather than null when valid, and no Err.
func TestCheckJSON(t *testing.T) {
	for name, c := range map[string]Check{
		"Valid":   CheckFile(filepath.Join("testdata", "good.yaml"), false),
		"Invalid": CheckFile(filepath.Join("testdata", "unknown_field.yaml"), false),
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := c.WriteJSON(&buf); err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, buf.String())
			}
			keys := make([]string, 0, len(got))
			for k := range got {
				keys = append(keys, k)
			}
			want := []string{"desired_sources", "envoys", "errors", "file", "mode", "pairings", "valid"}
			if diff := cmp.Diff(want, keys, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
			if errs, ok := got["errors"].([]any); !ok || (c.Valid != (len(errs) == 0)) {
				t.Errorf("errors %#v with valid %v", got["errors"], c.Valid)
			}
			if !strings.HasPrefix(buf.String(), "{\n  \"valid\": ") {
				t.Errorf("want an indented document starting with valid:\n%s", buf.String())
			}
		})
	}
}
