// Package release checks what `make release-snapshot` leaves in dist/ (GoReleaser's archives and
// checksums, the OCI image, the packaged chart and the kustomize bundle) and that `make build`
// stamps the version. Every artifact must carry the version scripts/version.sh prints for the
// current tree: an artifact from another commit fails with the command that rebuilds it.
package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
	"sigs.k8s.io/yaml"

	"github.com/certdrift/certdrift/test/testbed"
)

const (
	root    = "../.."
	rebuild = "run `make release-snapshot` (or `make test-release`, which also runs these tests)"
)

var dist = filepath.Join(root, "dist")

// command runs name with a deadline and returns its stdout.
func command(t *testing.T, dir string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// treeVersion is what scripts/version.sh prints for this tree: the version every artifact must carry.
func treeVersion(t *testing.T) (version, commit string) {
	t.Helper()
	v, err := command(t, root, nil, "scripts/version.sh")
	if err != nil {
		t.Fatal(err)
	}
	c, err := command(t, root, nil, "scripts/version.sh", "--commit")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(v), strings.TrimSpace(c)
}

// versionLine is the first line of `certdrift version`: "certdrift <version>".
func versionOutput(t *testing.T, bin string) (version, commit string) {
	t.Helper()
	out, err := command(t, ".", nil, bin, "version")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "certdrift "); ok {
			version = v
		}
		if c, ok := strings.CutPrefix(line, "commit: "); ok {
			commit = c
		}
	}
	if version == "" {
		t.Fatalf("%s version printed no \"certdrift <version>\" line:\n%s", bin, out)
	}
	return version, commit
}

// TestMakeBuildStampsVersion: `make build` stamps scripts/version.sh's version and the commit.
// The control is a plain `go build` without ldflags (and without VCS stamping, as GOFLAGS may set
// here), which must not pass the same check.
func TestMakeBuildStampsVersion(t *testing.T) {
	want, wantCommit := treeVersion(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "certdrift")
	if _, err := command(t, root, nil, "make", "--no-print-directory", "-s", "build", "BIN="+bin); err != nil {
		t.Fatal(err)
	}
	v, c := versionOutput(t, bin)
	if v != want || v == "dev" {
		t.Errorf("make build's binary reports version %q, want scripts/version.sh's %q", v, want)
	}
	if c != wantCommit {
		t.Errorf("make build's binary reports commit %q, want %q", c, wantCommit)
	}

	plain := filepath.Join(dir, "plain")
	if _, err := command(t, root, []string{"CGO_ENABLED=0"}, "go", "build", "-buildvcs=false", "-o", plain, "./cmd/certdrift"); err != nil {
		t.Fatal(err)
	}
	if v, _ := versionOutput(t, plain); v != "dev" {
		t.Errorf("control: an unstamped go build reports %q, want dev (the check above could not tell a stamped binary from an unstamped one)", v)
	}
}

// TestGoReleaserArtifacts: four archives (linux and darwin, amd64 and arm64), each holding a
// binary for its platform and the README; a checksums file whose every line matches its file;
// the linux/amd64 binary runs and prints the version.
func TestGoReleaserArtifacts(t *testing.T) {
	version, commit := treeVersion(t)
	semver := strings.TrimPrefix(version, "v")
	rel := filepath.Join(dist, "release")
	archives, _ := filepath.Glob(filepath.Join(rel, "certdrift_*.tar.gz"))
	var names []string
	for _, a := range archives {
		names = append(names, filepath.Base(a))
	}
	var want []string
	for _, p := range []string{"darwin_amd64", "darwin_arm64", "linux_amd64", "linux_arm64"} {
		want = append(want, fmt.Sprintf("certdrift_%s_%s.tar.gz", semver, p))
	}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Fatalf("archives in %s (-want +got):\n%s\n%s", rel, diff, rebuild)
	}

	sums := filepath.Join(rel, fmt.Sprintf("certdrift_%s_checksums.txt", semver))
	listed := checkChecksums(t, sums)
	for _, w := range append(slices.Clone(want), fmt.Sprintf("certdrift-%s.tgz", semver),
		"certdrift-kustomize-"+version+".tar.gz", "certdrift-image.tar") {
		if !listed[w] {
			t.Errorf("%s does not list %s", sums, w)
		}
	}

	for _, name := range want {
		files := untar(t, filepath.Join(rel, name))
		if _, ok := files["README.md"]; !ok {
			t.Errorf("%s has no README.md", name)
		}
		bin, ok := files["certdrift"]
		if !ok {
			t.Errorf("%s has no certdrift binary", name)
			continue
		}
		goos, goarch, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(name, "certdrift_"+semver+"_"), ".tar.gz"), "_")
		checkBinaryPlatform(t, name, bin, goos, goarch)
		if goos == runtime.GOOS && goarch == runtime.GOARCH {
			p := filepath.Join(t.TempDir(), "certdrift")
			if err := os.WriteFile(p, bin, 0o755); err != nil {
				t.Fatal(err)
			}
			v, c := versionOutput(t, p)
			if v != version || c != commit {
				t.Errorf("%s: certdrift version says %s (commit %s), want %s (commit %s)", name, v, c, version, commit)
			}
		}
	}
}

// checkChecksums verifies each "<sha256>  <name>" line of file against the named file (in the
// file's directory, or in dist/ for the chart, the kustomize bundle and the image) and returns
// the names listed.
func checkChecksums(t *testing.T, file string) map[string]bool {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("checksums: %v\n%s", err, rebuild)
	}
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			t.Errorf("%s: malformed line %q", file, sc.Text())
			continue
		}
		listed[name] = true
		path := filepath.Join(filepath.Dir(file), name)
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			path = filepath.Join(dist, name)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s lists %s: %v", file, name, err)
			continue
		}
		got := sha256.Sum256(b)
		if hex.EncodeToString(got[:]) != sum {
			t.Errorf("%s: %s has sha256 %x, the file says %s", file, name, got, sum)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(listed) == 0 {
		t.Fatalf("%s lists nothing", file)
	}
	return listed
}

// checkBinaryPlatform checks that bin is an executable for goos/goarch, and on Linux a static one.
func checkBinaryPlatform(t *testing.T, name string, bin []byte, goos, goarch string) {
	t.Helper()
	switch goos {
	case "linux":
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Errorf("%s: certdrift is not ELF: %v", name, err)
			return
		}
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
		if f.Machine != want {
			t.Errorf("%s: ELF machine %v, want %v", name, f.Machine, want)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s: the binary has an ELF interpreter (not static; CGO_ENABLED=0 was not applied)", name)
			}
		}
	case "darwin":
		f, err := macho.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Errorf("%s: certdrift is not Mach-O: %v", name, err)
			return
		}
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[goarch]
		if f.Cpu != want {
			t.Errorf("%s: Mach-O CPU %v, want %v", name, f.Cpu, want)
		}
	default:
		t.Errorf("%s: unexpected OS %q", name, goos)
	}
}

// untar reads a .tar.gz (or a plain .tar) into memory: name → content, regular files only.
func untar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, rebuild)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, "gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		r = zr
	}
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, h.Name, err)
		}
		files[h.Name] = b
	}
	return files
}

// TestImage inspects dist/certdrift-image.tar (an OCI layout in one tar) with
// go-containerregistry: one index named by the version, an image per platform with the
// non-root user, the entrypoint and the OCI labels; the host platform's binary, extracted from
// the layers, runs and prints the version.
func TestImage(t *testing.T) {
	version, commit := treeVersion(t)
	dir := t.TempDir()
	for name, b := range untar(t, filepath.Join(dist, "certdrift-image.tar")) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("the image tarball is not an OCI layout: %v", err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != version {
		t.Fatalf("index.json: want one index named %s, got %+v\n%s", version, tm.Manifests, rebuild)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	ran := false
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Errorf("manifest %s has no platform", d.Digest)
			continue
		}
		platforms = append(platforms, d.Platform.String())
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != d.Platform.OS || cf.Architecture != d.Platform.Architecture {
			t.Errorf("%s: config says %s/%s", d.Platform, cf.OS, cf.Architecture)
		}
		if cf.Config.User != "65532:65532" {
			t.Errorf("%s: user %q, want 65532:65532 (numeric, non-root)", d.Platform, cf.Config.User)
		}
		if diff := cmp.Diff([]string{"/usr/local/bin/certdrift"}, cf.Config.Entrypoint); diff != "" {
			t.Errorf("%s: entrypoint (-want +got):\n%s", d.Platform, diff)
		}
		for k, w := range map[string]string{
			"org.opencontainers.image.version":  version,
			"org.opencontainers.image.revision": commit,
			"org.opencontainers.image.source":   "https://github.com/certdrift/certdrift",
		} {
			if got := cf.Config.Labels[k]; got != w {
				t.Errorf("%s: label %s=%q, want %q", d.Platform, k, got, w)
			}
		}
		if _, err := time.Parse(time.RFC3339, cf.Config.Labels["org.opencontainers.image.created"]); err != nil {
			t.Errorf("%s: label org.opencontainers.image.created: %v", d.Platform, err)
		}
		files := flatten(t, img)
		if _, ok := files["etc/ssl/certs/ca-certificates.crt"]; !ok {
			t.Errorf("%s: no CA bundle at /etc/ssl/certs/ca-certificates.crt (public CAs' chains would not verify)", d.Platform)
		}
		bin, ok := files["usr/local/bin/certdrift"]
		if !ok {
			t.Errorf("%s: no /usr/local/bin/certdrift", d.Platform)
			continue
		}
		checkBinaryPlatform(t, d.Platform.String(), bin, d.Platform.OS, d.Platform.Architecture)
		if d.Platform.OS == runtime.GOOS && d.Platform.Architecture == runtime.GOARCH {
			p := filepath.Join(t.TempDir(), "certdrift")
			if err := os.WriteFile(p, bin, 0o755); err != nil {
				t.Fatal(err)
			}
			if v, c := versionOutput(t, p); v != version || c != commit {
				t.Errorf("the image's binary says %s (commit %s), want %s (commit %s)", v, c, version, commit)
			}
			ran = true
		}
	}
	slices.Sort(platforms)
	if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, platforms); diff != "" {
		t.Errorf("platforms (-want +got):\n%s", diff)
	}
	if !ran {
		t.Errorf("no image for this machine's %s/%s: its binary was not run", runtime.GOOS, runtime.GOARCH)
	}
}

// flatten is the image's filesystem (regular files), as a container runtime would unpack it.
func flatten(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[strings.TrimPrefix(h.Name, "/")] = b
		}
	}
}

// TestChartPackage: the packaged chart carries the version (Chart.yaml's version without the
// "v", appVersion with it) and renders the release's image tag, pulled IfNotPresent.
func TestChartPackage(t *testing.T) {
	version, _ := treeVersion(t)
	semver := strings.TrimPrefix(version, "v")
	pkg := filepath.Join(dist, "certdrift-"+semver+".tgz")
	files := untar(t, pkg)
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(files["certdrift/Chart.yaml"], &chart); err != nil {
		t.Fatalf("%s: certdrift/Chart.yaml: %v", pkg, err)
	}
	if chart.Version != semver || chart.AppVersion != version {
		t.Errorf("packaged Chart.yaml: version %q appVersion %q, want %q and %q", chart.Version, chart.AppVersion, semver, version)
	}

	helm, err := command(t, root, nil, "scripts/build-helm.sh", "--check")
	if err != nil {
		t.Fatalf("the helm CLI is not built: run `make helm`\n%v", err)
	}
	home := t.TempDir()
	out, err := command(t, ".", []string{"HELM_CACHE_HOME=" + home, "HELM_CONFIG_HOME=" + home, "HELM_DATA_HOME=" + home},
		strings.TrimSpace(helm), "template", "certdrift", pkg, "--namespace", "certdrift")
	if err != nil {
		t.Fatal(err)
	}
	img, policy := deploymentImage(t, out)
	if want := "ghcr.io/certdrift/certdrift:" + version; img != want || policy != "IfNotPresent" {
		t.Errorf("helm template of the package: image %q pulled %q, want %q pulled IfNotPresent", img, policy, want)
	}
}

// TestKustomizeBundle: the kustomize bundle's overlays render the release's image tag.
func TestKustomizeBundle(t *testing.T) {
	version, _ := treeVersion(t)
	kubectl := filepath.Join(root, ".cache", "kube", testbed.KubeVersion, "kubectl")
	if env := os.Getenv(testbed.BinDirEnv); env != "" {
		kubectl = filepath.Join(env, "kubectl")
	}
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("kubectl (for its built-in kustomize) not found at %s: run `make kube`", kubectl)
	}
	kubectl, _ = filepath.Abs(kubectl)
	dir := t.TempDir()
	for name, b := range untar(t, filepath.Join(dist, "certdrift-kustomize-"+version+".tar.gz")) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := command(t, dir, nil, kubectl, "kustomize", filepath.Join("certdrift-kustomize-"+version, "overlays", "cluster-readonly"))
	if err != nil {
		t.Fatal(err)
	}
	if img, _ := deploymentImage(t, out); img != "ghcr.io/certdrift/certdrift:"+version {
		t.Errorf("kustomize bundle renders image %q, want ghcr.io/certdrift/certdrift:%s", img, version)
	}
}

// deploymentImage returns the image and pull policy of the one Deployment in a rendered stream.
func deploymentImage(t *testing.T, stream string) (image, policy string) {
	t.Helper()
	var found int
	for _, doc := range strings.Split(stream, "\n---") {
		var d struct {
			Kind string `json:"kind"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Image           string `json:"image"`
							ImagePullPolicy string `json:"imagePullPolicy"`
						} `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatalf("decode rendered object: %v\n%s", err, doc)
		}
		if d.Kind != "Deployment" || len(d.Spec.Template.Spec.Containers) == 0 {
			continue
		}
		found++
		image, policy = d.Spec.Template.Spec.Containers[0].Image, d.Spec.Template.Spec.Containers[0].ImagePullPolicy
	}
	if found != 1 {
		t.Fatalf("%d Deployments rendered, want 1", found)
	}
	return image, policy
}

// TestGoInstallVersion: `go install github.com/certdrift/certdrift/cmd/certdrift@<version>`
// reports that version, with no -ldflags at all (the version falls back to the module version the
// go command records). The module is served at a test version from a file:// module proxy made
// from the committed tree (git HEAD), ahead of the real proxy for the dependencies; the test's
// module version is removed from the module cache afterwards.
func TestGoInstallVersion(t *testing.T) {
	_, commit := treeVersion(t)
	const modPath = "github.com/certdrift/certdrift"
	// Unique per commit: the module cache never holds two different zips under one version.
	version := "v0.0.1-release-test." + commit[:12]
	proxy := t.TempDir()
	vdir := filepath.Join(proxy, filepath.FromSlash(modPath), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	// git archive rather than zip.CreateFromVCS, which does not recognise a git worktree (.git
	// is a file there): the committed tree only, as the module proxy would serve a tag.
	src := t.TempDir()
	if _, err := command(t, abs, nil, "sh", "-c", `git archive --format=tar HEAD | tar -xf - -C "$0"`, src); err != nil {
		t.Fatal(err)
	}
	zf, err := os.Create(filepath.Join(vdir, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	if err := modzip.CreateFromDir(zf, module.Version{Path: modPath, Version: version}, src); err != nil {
		t.Fatalf("module zip of HEAD: %v", err)
	}
	if err := zf.Close(); err != nil {
		t.Fatal(err)
	}
	gomod, err := command(t, root, nil, "git", "show", "HEAD:go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"list":            version + "\n",
		version + ".mod":  gomod,
		version + ".info": fmt.Sprintf(`{"Version":%q,"Time":%q}`, version, time.Now().UTC().Format(time.RFC3339)),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	upstream, err := command(t, root, nil, "go", "env", "GOPROXY")
	if err != nil {
		t.Fatal(err)
	}
	modcache, err := command(t, root, nil, "go", "env", "GOMODCACHE")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The module cache is read-only by design; make this version's entries writable to remove them.
		for _, p := range []string{
			filepath.Join(strings.TrimSpace(modcache), modPath+"@"+version),
			filepath.Join(strings.TrimSpace(modcache), "cache", "download", modPath, "@v"),
		} {
			_ = filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
				if err == nil {
					_ = os.Chmod(q, 0o755)
				}
				return nil
			})
			if strings.HasSuffix(p, "@v") {
				matches, _ := filepath.Glob(filepath.Join(p, version+".*"))
				for _, m := range matches {
					_ = os.Remove(m)
				}
				// The go command's list of cached versions: gone when it names only test versions.
				list := filepath.Join(p, "list")
				if b, err := os.ReadFile(list); err == nil && !slices.ContainsFunc(strings.Fields(string(b)), func(v string) bool {
					return !strings.HasPrefix(v, "v0.0.1-release-test.")
				}) {
					_ = os.Remove(list)
				}
				continue
			}
			_ = os.RemoveAll(p)
		}
	})
	gobin := t.TempDir()
	env := []string{
		"GOPROXY=" + (&url.URL{Scheme: "file", Path: proxy}).String() + "," + strings.TrimSpace(upstream),
		"GONOSUMDB=" + modPath, // the test version is in no checksum database
		"GOBIN=" + gobin, "CGO_ENABLED=0", "GOFLAGS=",
	}
	if _, err := command(t, t.TempDir(), env, "nice", "-n", "10", "go", "install", modPath+"/cmd/certdrift@"+version); err != nil {
		t.Fatal(err)
	}
	v, c := versionOutput(t, filepath.Join(gobin, "certdrift"))
	if v != version {
		t.Errorf("go install …@%s: certdrift version says %q", version, v)
	}
	// A build from the module cache records no VCS settings, and a non-pseudo version names no commit.
	if c != "unknown" {
		t.Errorf("go install …@%s: commit %q, want unknown", version, c)
	}
}
