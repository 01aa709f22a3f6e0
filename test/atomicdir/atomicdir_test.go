package atomicdir

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var tsName = regexp.MustCompile(`^\.\.\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\.\d+$`)

// snapshot describes dir as a reader sees it: each entry with its symlink target ("" for a
// regular entry), and the content of every visible key read through its symlink.
type snapshot struct {
	Links   map[string]string
	Content map[string]string
}

func look(t *testing.T, dir string) snapshot {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("ReadDir(%s): %v", dir, err)
	}
	s := snapshot{Links: map[string]string{}, Content: map[string]string{}}
	for _, e := range entries {
		name := e.Name()
		target, err := os.Readlink(filepath.Join(dir, name))
		if err != nil {
			target = ""
		}
		if tsName.MatchString(name) {
			name = "<ts>"
		}
		if tsName.MatchString(target) {
			target = "<ts>"
		}
		s.Links[name] = target
		if fi, err := os.Stat(filepath.Join(dir, e.Name())); e.Name()[0] != '.' && err == nil && !fi.IsDir() {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatalf("read visible key %s: %v", name, err)
			}
			s.Content[name] = string(b)
		}
	}
	return s
}

func TestWriteSequence(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	steps := []struct {
		name  string
		files map[string][]byte
		want  snapshot
	}{
		{
			name:  "FirstWriteCreatesLayout",
			files: map[string][]byte{"tls.crt": []byte("c1"), "tls.key": []byte("k1")},
			want: snapshot{
				Links:   map[string]string{"<ts>": "", "..data": "<ts>", "tls.crt": "..data/tls.crt", "tls.key": "..data/tls.key"},
				Content: map[string]string{"tls.crt": "c1", "tls.key": "k1"},
			},
		},
		{
			name:  "NewKeyAddedOldDirRemoved",
			files: map[string][]byte{"tls.crt": []byte("c2"), "tls.key": []byte("k2"), "ca.crt": []byte("ca")},
			want: snapshot{
				Links:   map[string]string{"<ts>": "", "..data": "<ts>", "ca.crt": "..data/ca.crt", "tls.crt": "..data/tls.crt", "tls.key": "..data/tls.key"},
				Content: map[string]string{"ca.crt": "ca", "tls.crt": "c2", "tls.key": "k2"},
			},
		},
		{
			name:  "VanishedKeyLosesSymlink",
			files: map[string][]byte{"tls.crt": []byte("c3"), "tls.key": []byte("k3")},
			want: snapshot{
				Links:   map[string]string{"<ts>": "", "..data": "<ts>", "tls.crt": "..data/tls.crt", "tls.key": "..data/tls.key"},
				Content: map[string]string{"tls.crt": "c3", "tls.key": "k3"},
			},
		},
		{
			name:  "NestedKeyLinksTopLevel",
			files: map[string][]byte{"sub/a.crt": []byte("a")},
			want: snapshot{
				Links:   map[string]string{"<ts>": "", "..data": "<ts>", "sub": "..data/sub"},
				Content: map[string]string{},
			},
		},
	}
	for _, st := range steps {
		if err := Write(dir, st.files); err != nil {
			t.Fatalf("%s: Write: %v", st.name, err)
		}
		got := look(t, dir)
		if st.name == "NestedKeyLinksTopLevel" {
			b, err := os.ReadFile(filepath.Join(dir, "sub", "a.crt"))
			if err != nil || string(b) != "a" {
				t.Errorf("%s: read sub/a.crt = %q, %v", st.name, b, err)
			}
		}
		if d := cmp.Diff(st.want, got); d != "" {
			t.Errorf("%s: layout (-want +got):\n%s", st.name, d)
		}
	}
}

func TestWriteSwapsDataAndKeepsOneVersion(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, map[string][]byte{"a": []byte("1")}); err != nil {
		t.Fatal(err)
	}
	first, err := Current(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !tsName.MatchString(first) {
		t.Errorf("..data -> %q, want ..YYYY_MM_DD_HH_MM_SS.N", first)
	}
	if fi, err := os.Stat(filepath.Join(dir, first)); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("timestamped dir mode = %v, %v; want 0755", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "a")); err != nil || fi.Mode().Perm() != FileMode {
		t.Errorf("file mode = %v, %v; want %v", fi.Mode(), err, FileMode)
	}

	// Unchanged payload: the kubelet does not rewrite, so ..data must not move.
	if err := Write(dir, map[string][]byte{"a": []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if same, _ := Current(dir); same != first {
		t.Errorf("unchanged payload moved ..data from %s to %s", first, same)
	}

	if err := Write(dir, map[string][]byte{"a": []byte("2")}); err != nil {
		t.Fatal(err)
	}
	second, _ := Current(dir)
	if second == first {
		t.Fatalf("changed payload left ..data at %s", first)
	}
	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Errorf("old timestamped dir %s still present (err=%v)", first, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, DataTmpLink)); !os.IsNotExist(err) {
		t.Errorf("%s left behind (err=%v)", DataTmpLink, err)
	}
}

func TestWriteRejectsReservedAndBadKeys(t *testing.T) {
	cases := map[string]map[string][]byte{
		"Empty":          {},
		"EmptyKey":       {"": []byte("x")},
		"Absolute":       {"/etc/passwd": []byte("x")},
		"DotDotElement":  {"a/../../b": []byte("x")},
		"ReservedPrefix": {"..data": []byte("x")},
		"LongElement":    {string(make([]byte, 256)): []byte("x")},
	}
	for name, files := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := Write(dir, files); err == nil {
				t.Fatalf("Write accepted %v", keys(files))
			}
			if _, err := os.Lstat(filepath.Join(dir, DataLink)); !os.IsNotExist(err) {
				t.Errorf("rejected payload still created %s", DataLink)
			}
		})
	}
}

func TestBrokenLayoutHelpers(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, map[string][]byte{"tls.crt": []byte("old")}); err != nil {
		t.Fatal(err)
	}
	old, _ := Current(dir)

	next, err := Interrupted(dir, map[string][]byte{"tls.crt": []byte("new")})
	if err != nil {
		t.Fatal(err)
	}
	if cur, _ := Current(dir); cur != old {
		t.Errorf("Interrupted moved ..data to %s", cur)
	}
	if tmp, err := os.Readlink(filepath.Join(dir, DataTmpLink)); err != nil || tmp != next {
		t.Errorf("..data_tmp -> %q, %v; want %s", tmp, err, next)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "tls.crt")); string(b) != "old" {
		t.Errorf("after Interrupted tls.crt = %q, want old", b)
	}

	// A later Write recovers from the leftover ..data_tmp, as the kubelet does on its next sync.
	if err := Write(dir, map[string][]byte{"tls.crt": []byte("newer")}); err != nil {
		t.Fatalf("Write after Interrupted: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "tls.crt")); string(b) != "newer" {
		t.Errorf("after recovery tls.crt = %q, want newer", b)
	}

	when := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := SetTime(dir, when); err != nil {
		t.Fatal(err)
	}
	cur, _ := Current(dir)
	if fi, err := os.Stat(filepath.Join(dir, cur)); err != nil || !fi.ModTime().Equal(when) {
		t.Errorf("SetTime: mtime = %v, %v; want %v", fi.ModTime(), err, when)
	}

	if err := Dangle(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, DataLink)); !os.IsNotExist(err) {
		t.Errorf("after Dangle, Stat(..data) err = %v, want not-exist", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, DataLink)); err != nil {
		t.Errorf("Dangle removed the ..data link itself: %v", err)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
