package files

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
	"github.com/certdrift/certdrift/ref"
	"github.com/certdrift/certdrift/test/atomicdir"
	"github.com/certdrift/certdrift/test/certs"
)

// pkiSet is what the cases are built from: a root, an intermediate, two leaves and a foreign key.
type pkiSet struct {
	root, inter *certs.Authority
	a, b        *certs.Leaf
}

func newPKI(t *testing.T) pkiSet {
	t.Helper()
	root := certs.NewCA(t)
	inter := root.Intermediate(t)
	return pkiSet{
		root:  root,
		inter: inter,
		a:     inter.Leaf(t, certs.WithDNSNames("a.example.com")),
		b:     inter.Leaf(t, certs.WithDNSNames("b.example.com")),
	}
}

// summary is a desired.Item reduced to what a case asserts: identities instead of parsed structures,
// and error kinds instead of error text.
type summary struct {
	Name                      string
	CertPath, KeyPath, CAPath string
	Leaf                      string // fingerprint of the first certificate
	ChainLen, CALen           int
	HasKey, KeyMatches        bool
	ChainErr, KeyErr, CAErr   string
}

func kind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, pki.ErrTooLarge):
		return "too_large"
	case errors.Is(err, fs.ErrNotExist):
		return "not_exist"
	case errors.Is(err, ErrNotRegular):
		return "not_regular"
	case errors.Is(err, ErrDangling):
		return "dangling"
	case errors.Is(err, ErrNotDir):
		return "not_dir"
	case errors.Is(err, ErrUnsettled):
		return "unsettled"
	case errors.Is(err, pki.ErrNoCertificates):
		return "no_certificates"
	default:
		return "other"
	}
}

func summarize(it desired.Item) summary {
	s := summary{
		Name: it.Name, CertPath: it.CertPath, KeyPath: it.KeyPath, CAPath: it.CAPath,
		ChainLen: len(it.Chain), CALen: len(it.CA), HasKey: it.Key != nil,
		ChainErr: kind(it.ChainErr), KeyErr: kind(it.KeyErr), CAErr: kind(it.CAErr),
	}
	if len(it.Chain) > 0 {
		s.Leaf = pki.Fingerprint(it.Chain[0])
		s.KeyMatches = it.Key != nil && pki.KeyMatches(it.Chain[0], it.Key.Public)
	}
	return s
}

func TestRead(t *testing.T) {
	p := newPKI(t)
	fpA, fpB := pki.Fingerprint(p.a.Cert), pki.Fingerprint(p.b.Cert)
	pinned := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	secretish := []byte("-----BEGIN PRIVATE KEY-----\nU0VDUkVULUtFWS1NQVRFUklBTA==\n-----END PRIVATE KEY-----\n")

	kubelet := func(files map[string][]byte) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			if err := atomicdir.Write(dir, files); err != nil {
				t.Fatal(err)
			}
			if err := atomicdir.SetTime(dir, pinned); err != nil {
				t.Fatal(err)
			}
		}
	}
	plain := func(files map[string][]byte) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			certs.WriteFiles(t, dir, files)
			for name := range files {
				old := pinned.Add(-time.Hour)
				if name == "tls.crt" || name == "cert.pem" {
					old = pinned // the newest file decides ChangedAt
				}
				if err := os.Chtimes(filepath.Join(dir, name), old, old); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	tlsFiles := map[string][]byte{"tls.crt": p.a.ChainPEM(), "tls.key": p.a.KeyPEM, "ca.crt": certs.Bundle(p.root)}

	cases := []struct {
		name   string
		reason string
		setup  func(t *testing.T, dir string)
		src    func(dir string) Source
		// Expected values; "<dir>" in paths is replaced by the case's directory.
		wantErr     string
		wantKubelet bool
		wantChanged time.Time
		want        []summary
	}{
		{
			name:        "KubeletDefaultKeys",
			reason:      "a kubernetes.io/tls Secret volume: leaf+intermediate, key, CA",
			setup:       kubelet(tlsFiles),
			src:         func(d string) Source { return Source{Dir: d} },
			wantKubelet: true, wantChanged: pinned,
			want: []summary{{CertPath: "<dir>/tls.crt", KeyPath: "<dir>/tls.key", CAPath: "<dir>/ca.crt", Leaf: fpA, ChainLen: 2, CALen: 1, HasKey: true, KeyMatches: true}},
		},
		{
			name:        "KubeletWithoutCA",
			reason:      "most Secrets carry no ca.crt; that is not an error",
			setup:       kubelet(map[string][]byte{"tls.crt": p.a.CertPEM, "tls.key": p.a.KeyPEM}),
			src:         func(d string) Source { return Source{Dir: d} },
			wantKubelet: true, wantChanged: pinned,
			want: []summary{{CertPath: "<dir>/tls.crt", KeyPath: "<dir>/tls.key", CAPath: "<dir>/ca.crt", Leaf: fpA, ChainLen: 1, HasKey: true, KeyMatches: true}},
		},
		{
			name:        "PlainDirectoryNewestFileTime",
			reason:      "no ..data: files read in place, ChangedAt from the newest file",
			setup:       plain(tlsFiles),
			src:         func(d string) Source { return Source{Dir: d} },
			wantChanged: pinned,
			want:        []summary{{CertPath: "<dir>/tls.crt", KeyPath: "<dir>/tls.key", CAPath: "<dir>/ca.crt", Leaf: fpA, ChainLen: 2, CALen: 1, HasKey: true, KeyMatches: true}},
		},
		{
			name:   "CustomKeyNames",
			reason: "an Opaque Secret with its own key names",
			setup:  kubelet(map[string][]byte{"cert.pem": p.b.CertPEM, "key.pem": p.b.KeyPEM, "bundle.pem": certs.Bundle(p.inter, p.root)}),
			src: func(d string) Source {
				return Source{Dir: d, CertKey: "cert.pem", KeyKey: "key.pem", CAKey: "bundle.pem"}
			},
			wantKubelet: true, wantChanged: pinned,
			want: []summary{{CertPath: "<dir>/cert.pem", KeyPath: "<dir>/key.pem", CAPath: "<dir>/bundle.pem", Leaf: fpB, ChainLen: 1, CALen: 2, HasKey: true, KeyMatches: true}},
		},
		{
			name:        "ExplicitFilesPlain",
			reason:      "explicit paths outside any volume",
			setup:       plain(map[string][]byte{"cert.pem": p.a.CertPEM, "k.pem": p.a.KeyPEM}),
			src:         func(d string) Source { return Source{CertFile: d + "/cert.pem", KeyFile: d + "/k.pem"} },
			wantChanged: pinned,
			want:        []summary{{CertPath: "<dir>/cert.pem", KeyPath: "<dir>/k.pem", Leaf: fpA, ChainLen: 1, HasKey: true, KeyMatches: true}},
		},
		{
			name:   "ExplicitFilesInKubeletVolume",
			reason: "explicit paths that are kubelet symlinks are read through one resolved ..data",
			setup:  kubelet(tlsFiles),
			src: func(d string) Source {
				return Source{CertFile: d + "/tls.crt", KeyFile: d + "/tls.key", CAFile: d + "/ca.crt"}
			},
			wantKubelet: true, wantChanged: pinned,
			want: []summary{{CertPath: "<dir>/tls.crt", KeyPath: "<dir>/tls.key", CAPath: "<dir>/ca.crt", Leaf: fpA, ChainLen: 2, CALen: 1, HasKey: true, KeyMatches: true}},
		},
		{
			name:        "ExplicitKeyMissing",
			reason:      "a key file named explicitly must exist",
			setup:       plain(map[string][]byte{"cert.pem": p.a.CertPEM}),
			src:         func(d string) Source { return Source{CertFile: d + "/cert.pem", KeyFile: d + "/nope.key"} },
			wantChanged: pinned,
			want:        []summary{{CertPath: "<dir>/cert.pem", KeyPath: "<dir>/nope.key", Leaf: fpA, ChainLen: 1, KeyErr: "not_exist"}},
		},
		{
			name:        "ExplicitTrustBundleOnly",
			reason:      "a source that is only a CA bundle (a listener's trusted CA, a ConfigMap root cert)",
			setup:       plain(map[string][]byte{"trust.pem": certs.Bundle(p.inter, p.root)}),
			src:         func(d string) Source { return Source{CAFile: d + "/trust.pem"} },
			wantChanged: pinned.Add(-time.Hour), // the only file read
			want:        []summary{{CAPath: "<dir>/trust.pem", CALen: 2}},
		},
		{
			name:    "ExplicitWithoutCertFile",
			reason:  "nothing to read is a configuration error",
			setup:   func(*testing.T, string) {},
			src:     func(d string) Source { return Source{KeyFile: d + "/k.pem"} },
			wantErr: "other",
		},
		{
			name:   "MergedLayout",
			reason: "ingress-gateway style Secret: one item per <name>.crt, shared ca.crt is not an item",
			setup: kubelet(map[string][]byte{
				"a.example.com.crt": p.a.ChainPEM(), "a.example.com.key": p.a.KeyPEM,
				"b.example.com.crt": p.b.CertPEM, "b.example.com.key": p.b.KeyPEM,
				"orphan.crt": p.b.CertPEM, "ca.crt": certs.Bundle(p.root), "notes.txt": []byte("hi"),
			}),
			src:         func(d string) Source { return Source{Dir: d, Merged: &MergedPattern{}} },
			wantKubelet: true, wantChanged: pinned,
			want: []summary{
				{Name: "a.example.com", CertPath: "<dir>/a.example.com.crt", KeyPath: "<dir>/a.example.com.key", CAPath: "<dir>/ca.crt", Leaf: fpA, ChainLen: 2, CALen: 1, HasKey: true, KeyMatches: true},
				{Name: "b.example.com", CertPath: "<dir>/b.example.com.crt", KeyPath: "<dir>/b.example.com.key", CAPath: "<dir>/ca.crt", Leaf: fpB, ChainLen: 1, CALen: 1, HasKey: true, KeyMatches: true},
				{Name: "orphan", CertPath: "<dir>/orphan.crt", KeyPath: "<dir>/orphan.key", CAPath: "<dir>/ca.crt", Leaf: fpB, ChainLen: 1, CALen: 1},
			},
		},
		{
			name:   "MergedCustomSuffixes",
			reason: "suffixes are configurable",
			setup:  plain(map[string][]byte{"x-cert.pem": p.a.CertPEM, "x-key.pem": p.a.KeyPEM, "tls.crt": p.b.CertPEM}),
			src: func(d string) Source {
				return Source{Dir: d, Merged: &MergedPattern{CertSuffix: "-cert.pem", KeySuffix: "-key.pem"}}
			},
			wantChanged: pinned.Add(-time.Hour),
			want:        []summary{{Name: "x", CertPath: "<dir>/x-cert.pem", KeyPath: "<dir>/x-key.pem", CAPath: "<dir>/ca.crt", Leaf: fpA, ChainLen: 1, HasKey: true, KeyMatches: true}},
		},
		{
			name:    "MergedNothingMatches",
			reason:  "a merged source with no certificates is a gap, not an empty success",
			setup:   plain(map[string][]byte{"readme": []byte("x")}),
			src:     func(d string) Source { return Source{Dir: d, Merged: &MergedPattern{}} },
			wantErr: "other",
		},
		{
			name:   "MergedSameSuffixes",
			reason: "a pattern that cannot tell certs from keys is refused",
			setup:  plain(map[string][]byte{"a.pem": p.a.CertPEM}),
			src: func(d string) Source {
				return Source{Dir: d, Merged: &MergedPattern{CertSuffix: ".pem", KeySuffix: ".pem"}}
			},
			wantErr: "other",
		},
		{
			name:        "KeyDoesNotMatch",
			reason:      "files reports the pair as found; judging the mismatch is audit's job",
			setup:       kubelet(map[string][]byte{"tls.crt": p.a.CertPEM, "tls.key": p.b.KeyPEM}),
			src:         func(d string) Source { return Source{Dir: d} },
			wantKubelet: true, wantChanged: pinned,
			want: []summary{{CertPath: "<dir>/tls.crt", KeyPath: "<dir>/tls.key", CAPath: "<dir>/ca.crt", Leaf: fpA, ChainLen: 1, HasKey: true}},
		},
		{
			name:        "MissingCertFile",
			reason:      "a missing certificate is an error on the item",
			setup:       kubelet(map[string][]byte{"tls.key": p.a.KeyPEM}),
			src:         func(d string) Source { return Source{Dir: d} },
			wantKubelet: true, wantChanged: pinned,
			want: []summary{{CertPath: "<dir>/tls.crt", KeyPath: "<dir>/tls.key", CAPath: "<dir>/ca.crt", ChainErr: "not_exist", HasKey: true}},
		},
		{
			name:        "GarbageEverywhere",
			reason:      "bad PEM in each file is reported per file, key text never quoted",
			setup:       kubelet(map[string][]byte{"tls.crt": []byte("hello"), "tls.key": secretish, "ca.crt": []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")}),
			src:         func(d string) Source { return Source{Dir: d} },
			wantKubelet: true, wantChanged: pinned,
			want: []summary{{CertPath: "<dir>/tls.crt", KeyPath: "<dir>/tls.key", CAPath: "<dir>/ca.crt", ChainErr: "other", KeyErr: "other", CAErr: "other"}},
		},
		{
			name:        "EmptyCertFile",
			reason:      "an empty tls.crt holds no certificate",
			setup:       plain(map[string][]byte{"tls.crt": nil}),
			src:         func(d string) Source { return Source{Dir: d} },
			wantChanged: pinned,
			want:        []summary{{CertPath: "<dir>/tls.crt", KeyPath: "<dir>/tls.key", CAPath: "<dir>/ca.crt", ChainErr: "no_certificates"}},
		},
		{
			name:   "DirectoryWhereFileShouldBe",
			reason: "tls.crt is a directory",
			setup: func(t *testing.T, d string) {
				if err := os.MkdirAll(filepath.Join(d, "tls.crt"), 0o755); err != nil {
					t.Fatal(err)
				}
				certs.WriteFiles(t, d, map[string][]byte{"tls.key": p.a.KeyPEM, "ca.crt/x": nil})
			},
			src:  func(d string) Source { return Source{Dir: d} },
			want: []summary{{CertPath: "<dir>/tls.crt", KeyPath: "<dir>/tls.key", CAPath: "<dir>/ca.crt", ChainErr: "not_regular", HasKey: true, CAErr: "not_regular"}},
		},
		{
			name:   "FIFOWhereFileShouldBe",
			reason: "a FIFO must be refused, not opened and waited on forever",
			setup: func(t *testing.T, d string) {
				if err := syscall.Mkfifo(filepath.Join(d, "tls.crt"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			src:  func(d string) Source { return Source{Dir: d} },
			want: []summary{{CertPath: "<dir>/tls.crt", KeyPath: "<dir>/tls.key", CAPath: "<dir>/ca.crt", ChainErr: "not_regular"}},
		},
		{
			name:   "OversizeFiles",
			reason: "files over the limit are refused by size",
			setup: func(t *testing.T, d string) {
				certs.WriteFiles(t, d, map[string][]byte{"tls.crt": p.a.CertPEM, "tls.key": p.a.KeyPEM})
				sparse(t, filepath.Join(d, "ca.crt"), 50<<20)
			},
			src:  func(d string) Source { return Source{Dir: d} },
			want: []summary{{CertPath: "<dir>/tls.crt", KeyPath: "<dir>/tls.key", CAPath: "<dir>/ca.crt", Leaf: fpA, ChainLen: 1, HasKey: true, KeyMatches: true, CAErr: "too_large"}},
		},
		{
			name:    "MissingDirectory",
			reason:  "the source as a whole cannot be read",
			setup:   func(t *testing.T, d string) { os.Remove(d) },
			src:     func(d string) Source { return Source{Dir: d} },
			wantErr: "not_exist",
		},
		{
			name:   "DirectoryIsAFile",
			reason: "Dir names a regular file",
			setup: func(t *testing.T, d string) {
				os.Remove(d)
				if err := os.WriteFile(d, []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			src:     func(d string) Source { return Source{Dir: d} },
			wantErr: "not_dir",
		},
		{
			name:   "DanglingData",
			reason: "..data points at a directory that is gone",
			setup: func(t *testing.T, d string) {
				kubelet(tlsFiles)(t, d)
				if err := atomicdir.Dangle(d); err != nil {
					t.Fatal(err)
				}
			},
			src:     func(d string) Source { return Source{Dir: d} },
			wantErr: "dangling",
		},
		{
			name:   "DataPointsAtFile",
			reason: "..data resolves to a regular file",
			setup: func(t *testing.T, d string) {
				certs.WriteFiles(t, d, map[string][]byte{"..2020_01_01_00_00_00.1": []byte("x")})
				if err := os.Symlink("..2020_01_01_00_00_00.1", filepath.Join(d, "..data")); err != nil {
					t.Fatal(err)
				}
			},
			src:     func(d string) Source { return Source{Dir: d} },
			wantErr: "not_dir",
		},
		{
			name:   "InterruptedKubeletWrite",
			reason: "a half-done update (..data_tmp present, ..data not yet swapped) shows the old version",
			setup: func(t *testing.T, d string) {
				kubelet(tlsFiles)(t, d)
				if _, err := atomicdir.Interrupted(d, map[string][]byte{"tls.crt": p.b.CertPEM, "tls.key": p.b.KeyPEM}); err != nil {
					t.Fatal(err)
				}
			},
			src:         func(d string) Source { return Source{Dir: d} },
			wantKubelet: true, wantChanged: pinned,
			want: []summary{{CertPath: "<dir>/tls.crt", KeyPath: "<dir>/tls.key", CAPath: "<dir>/ca.crt", Leaf: fpA, ChainLen: 2, CALen: 1, HasKey: true, KeyMatches: true}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "vol")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, dir)
			src := tc.src(dir)
			src.Name = tc.name

			obs := Read(src, pki.Limits{MaxBytes: 1 << 20})

			// The observation names the source as configured, with where it was looked for.
			type identity struct {
				Ref           ref.Source
				Dir, CertFile string
			}
			want := identity{ref.Source{Kind: ref.File, Name: tc.name}, src.Dir, src.CertFile}
			if d := cmp.Diff(want, identity{obs.Ref, obs.Dir, obs.CertFile}); d != "" {
				t.Errorf("%s: source identity (-want +got):\n%s", tc.reason, d)
			}
			if got := kind(obs.Err); got != tc.wantErr {
				t.Fatalf("%s: Err = %v (kind %q), want kind %q", tc.reason, obs.Err, got, tc.wantErr)
			}
			var got []summary
			for _, it := range obs.Items {
				s := summarize(it)
				s.CertPath = strings.Replace(s.CertPath, dir, "<dir>", 1)
				s.KeyPath = strings.Replace(s.KeyPath, dir, "<dir>", 1)
				s.CAPath = strings.Replace(s.CAPath, dir, "<dir>", 1)
				got = append(got, s)
				checkErrorText(t, it, secretish)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("%s: items (-want +got):\n%s", tc.reason, d)
			}
			if tc.wantKubelet {
				cur, err := atomicdir.Current(dir)
				if err != nil || obs.DataDir != cur {
					t.Errorf("%s: DataDir = %q, want %q (%v)", tc.reason, obs.DataDir, cur, err)
				}
			} else if obs.DataDir != "" {
				t.Errorf("%s: DataDir = %q for a non-kubelet source", tc.reason, obs.DataDir)
			}
			if tc.wantErr == "" && !tc.wantChanged.IsZero() && !obs.ChangedAt.Equal(tc.wantChanged) {
				t.Errorf("%s: ChangedAt = %v, want %v", tc.reason, obs.ChangedAt, tc.wantChanged)
			}
		})
	}
}

// checkErrorText asserts that every item error names its configured file and quotes no key
// material.
func checkErrorText(t *testing.T, it desired.Item, secret []byte) {
	t.Helper()
	for _, e := range []struct {
		err  error
		path string
	}{{it.ChainErr, it.CertPath}, {it.KeyErr, it.KeyPath}, {it.CAErr, it.CAPath}} {
		if e.err == nil {
			continue
		}
		msg := e.err.Error()
		if !strings.Contains(msg, e.path) {
			t.Errorf("error %q does not name the file %s", msg, e.path)
		}
		for _, bad := range []string{"-----BEGIN", "U0VDUkVU", string(secret)} {
			if strings.Contains(msg, bad) {
				t.Errorf("error quotes key material (%q): %q", bad, msg)
			}
		}
	}
}

// sparse creates a file of the given size that takes no disk space, so that a reader that reads
// before checking the size would have to allocate all of it.
func sparse(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}
