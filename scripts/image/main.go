// Command image builds certdrift's OCI image without a container daemon and without pulling a
// base image: `make image` runs it. For each platform it cross-compiles a static certdrift
// (CGO_ENABLED=0, -trimpath, the ldflags make passes, which stamp scripts/version.sh's version)
// and writes one layer holding the binary, the CA bundle the served-view chain checks need for
// public CAs, and /etc/passwd and /etc/group naming the non-root user; no shell, no package
// manager. The platform images go into one multi-platform index, written as an OCI image layout
// directory and as that directory in one tar file (an "oci-archive"), for crane and skopeo to
// push (docs/install.md).
//
// Built with go-containerregistry rather than ko: ko v0.19.1 takes its base image only from a
// registry or a Docker daemon (pkg/commands/config.go getBaseImage), and neither exists here; a
// base made locally needs neither. The output is reproducible: file and config times are the
// commit's (-created), and the layer's tar and gzip carry no other time or owner.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// 65532: the conventional "nonroot" id (distroless); the chart's and kustomize's
	// securityContext run as it too.
	uid        = 65532
	binaryPath = "usr/local/bin/certdrift"
	caPath     = "etc/ssl/certs/ca-certificates.crt"
)

type options struct {
	version, commit, created, source, ldflags, caFile string
	platforms                                         []string
	layoutDir, archive                                string
}

func main() {
	var o options
	var platforms string
	flag.StringVar(&o.version, "version", "", "the version (scripts/version.sh): label, and the layout's ref name")
	flag.StringVar(&o.commit, "commit", "", "the full commit id (label org.opencontainers.image.revision)")
	flag.StringVar(&o.created, "created", "", "RFC 3339 time of the image and its files (the commit's time, for reproducibility)")
	flag.StringVar(&o.source, "source", "https://github.com/certdrift/certdrift", "label org.opencontainers.image.source")
	flag.StringVar(&o.ldflags, "ldflags", "", "go build -ldflags (make passes the same as for make build)")
	flag.StringVar(&o.caFile, "ca-file", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle copied into the image")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated os/arch list")
	flag.StringVar(&o.layoutDir, "layout", "dist/image", "OCI image layout directory to write (replaced)")
	flag.StringVar(&o.archive, "archive", "dist/certdrift-image.tar", "the layout as one tar file (replaced)")
	flag.Parse()
	o.platforms = strings.Split(platforms, ",")
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.version == "" || o.commit == "" || o.created == "" {
		return errors.New("-version, -commit and -created are required (make image passes them from scripts/version.sh)")
	}
	created, err := time.Parse(time.RFC3339, o.created)
	if err != nil {
		return fmt.Errorf("-created %q: %w", o.created, err)
	}
	ca, err := os.ReadFile(o.caFile)
	if err != nil {
		return fmt.Errorf("read the CA bundle for the image (install Debian's ca-certificates, or pass -ca-file): %w", err)
	}
	work, err := os.MkdirTemp("", "certdrift-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range o.platforms {
		plat, err := v1.ParsePlatform(p)
		if err != nil || plat.OS != "linux" || plat.Architecture == "" {
			return fmt.Errorf("platform %q: want linux/<arch>", p)
		}
		bin := filepath.Join(work, plat.OS+"-"+plat.Architecture, "certdrift")
		if err := goBuild(bin, plat, o.ldflags); err != nil {
			return err
		}
		img, err := platformImage(o, created, *plat, bin, ca)
		if err != nil {
			return fmt.Errorf("image for %s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: plat},
		})
	}
	idx = mutate.Annotations(idx, labels(o)).(v1.ImageIndex)

	if err := os.RemoveAll(o.layoutDir); err != nil {
		return err
	}
	lp, err := layout.Write(o.layoutDir, empty.Index)
	if err != nil {
		return fmt.Errorf("write OCI layout %s: %w", o.layoutDir, err)
	}
	// The ref name lets `skopeo copy oci:dist/image:<version>` and crane pick the index by name.
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.version,
	})); err != nil {
		return fmt.Errorf("write OCI layout %s: %w", o.layoutDir, err)
	}
	if err := tarDir(o.layoutDir, o.archive, created); err != nil {
		return fmt.Errorf("write %s: %w", o.archive, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s@%s (%s)\n", o.archive, o.layoutDir, d, strings.Join(o.platforms, ", "))
	return nil
}

// labels are the OCI annotation keys, used as the config's labels and the index's annotations.
func labels(o options) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    "certdrift",
		"org.opencontainers.image.version":  o.version,
		"org.opencontainers.image.revision": o.commit,
		"org.opencontainers.image.source":   o.source,
		"org.opencontainers.image.created":  o.created,
	}
}

func goBuild(out string, p *v1.Platform, ldflags string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, "./cmd/certdrift")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if p.Variant != "" && p.Architecture == "arm" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s/%s: %w", p.OS, p.Architecture, err)
	}
	return nil
}

func platformImage(o options, created time.Time, p v1.Platform, bin string, ca []byte) (v1.Image, error) {
	binary, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	layerTar, err := rootfs(created, binary, ca)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "scripts/image: certdrift " + o.version + ", CA bundle, passwd",
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: created}
	cf.Config.User = fmt.Sprintf("%d:%d", uid, uid)
	cf.Config.Entrypoint = []string{"/" + binaryPath}
	cf.Config.Cmd = []string{"serve"}
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/usr/local/bin"}
	cf.Config.ExposedPorts = map[string]struct{}{"9809/tcp": {}}
	cf.Config.Labels = labels(o)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, v1.Time{Time: created})
}

// rootfs is the image's only layer, as an uncompressed tar.
func rootfs(created time.Time, binary, ca []byte) ([]byte, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, uid)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", uid)
	type entry struct {
		name string
		mode int64
		body []byte // nil for a directory
		uid  int
	}
	entries := []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: caPath, mode: 0o644, body: ca},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: uid},
		// Go's os.TempDir; with the chart's readOnlyRootFilesystem nothing is written here anyway.
		{name: "tmp/", mode: 0o1777},
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
		{name: binaryPath, mode: 0o755, body: binary},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: created, Uid: e.uid, Gid: e.uid, Format: tar.FormatPAX}
		if e.body == nil {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarDir writes dir as one tar file (an oci-archive: the layout's files at the archive's root),
// names sorted, times set to mtime, no owners.
func tarDir(dir, out string, mtime time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		names = append(names, p)
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(names)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, p := range names {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Mode: 0o644, Format: tar.FormatPAX}
		if fi.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, src)
		src.Close()
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
