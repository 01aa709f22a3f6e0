package testbed

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/certdrift/certdrift/test/atomicdir"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestSelectItems(t *testing.T) {
	data := map[string][]byte{"tls.crt": []byte("C"), "tls.key": []byte("K")}
	cases := map[string]struct {
		reason   string
		items    []corev1.KeyToPath
		optional bool
		want     map[string][]byte
		wantErr  bool
	}{
		"AllKeys":         {reason: "no items: every key", want: data},
		"Mapped":          {reason: "items map keys to paths", items: []corev1.KeyToPath{{Key: "tls.crt", Path: "certs/server.pem"}}, want: map[string][]byte{"certs/server.pem": []byte("C")}},
		"MissingKey":      {reason: "a missing key fails the volume", items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}, wantErr: true},
		"MissingOptional": {reason: "unless the source is optional", items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}, optional: true, want: map[string][]byte{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := selectItems("Secret", "s", data, tc.items, tc.optional)
			if (err != nil) != tc.wantErr {
				t.Fatalf("%s: error %v, wantErr %v", tc.reason, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); err == nil && diff != "" {
				t.Errorf("%s: files (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// TestCopySubPathPinsVersion: a subPath copy keeps the version current when it was made, while
// the volume moves on.
func TestCopySubPathPinsVersion(t *testing.T) {
	vol := filepath.Join(t.TempDir(), "vol")
	if err := atomicdir.Write(vol, map[string][]byte{"tls.crt": []byte("v1"), "dir/a": []byte("a1")}); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := copySubPath(vol, "tls.crt", filepath.Join(dst, "file")); err != nil {
		t.Fatal(err)
	}
	if err := copySubPath(vol, "dir", filepath.Join(dst, "dir")); err != nil {
		t.Fatal(err)
	}
	if err := atomicdir.Write(vol, map[string][]byte{"tls.crt": []byte("v2"), "dir/a": []byte("a2")}); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"file": "v1", "dir/a": "a1"} {
		got, err := os.ReadFile(filepath.Join(dst, path))
		if err != nil || string(got) != want {
			t.Errorf("subPath copy %s = %q, %v; want %q", path, got, err, want)
		}
	}
	if err := copySubPath(vol, "missing", filepath.Join(dst, "missing")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "missing")); err != nil || !fi.IsDir() {
		t.Errorf("a missing subPath should become an empty directory: %v", err)
	}
	for _, bad := range []string{"../x", "/etc/passwd", ""} {
		if err := copySubPath(vol, bad, filepath.Join(dst, "bad")); err == nil {
			t.Errorf("subPath %q accepted", bad)
		}
	}
}
