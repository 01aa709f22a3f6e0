package main

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"
)

// chromiumPath is where Debian's chromium package installs the browser.
const chromiumPath = "/usr/bin/chromium"

// findChromium returns the headless browser, or an error saying how to install it.
func findChromium() (string, error) {
	if _, err := os.Stat(chromiumPath); err != nil {
		return "", fmt.Errorf("%s not found: install Debian's headless browser with `apt-get install chromium` (as root; --no-install-recommends is enough)", chromiumPath)
	}
	return chromiumPath, nil
}

// screenshot has headless Chromium load htmlPath and write a width×height PNG to pngPath.
func screenshot(ctx context.Context, chromium, htmlPath, pngPath string, height int) error {
	profile, err := os.MkdirTemp("", "certdrift-chromium-")
	if err != nil {
		return fmt.Errorf("screenshot %s: %w", htmlPath, err)
	}
	defer os.RemoveAll(profile)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// --no-sandbox: the sandbox needs user namespaces, which containers and root CI lack; the
	// page is our own file, with no network access.
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--disable-gpu", "--no-sandbox",
		"--hide-scrollbars", "--no-first-run", "--disable-extensions", "--user-data-dir="+profile,
		"--screenshot="+pngPath, fmt.Sprintf("--window-size=%d,%d", pageWidth, height), "file://"+htmlPath)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("screenshot %s with %s: %w\n%s", htmlPath, chromium, err, tailBytes(out, 2000))
	}
	if _, err := checkPNG(pngPath); err != nil {
		return fmt.Errorf("screenshot %s: %w\nchromium said:\n%s", htmlPath, err, tailBytes(out, 2000))
	}
	return nil
}

func tailBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// pngStats is what checkPNG learned about an image.
type pngStats struct {
	Width, Height int
	Colors        int // distinct colours (counted up to 10000)
}

// checkPNG decodes a PNG and counts its colours: a blank or failed page is one or two colours.
func checkPNG(path string) (pngStats, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return pngStats{}, fmt.Errorf("read %s: %w", path, err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return pngStats{}, fmt.Errorf("%s is not a valid PNG: %w", path, err)
	}
	r := img.Bounds()
	st := pngStats{Width: r.Dx(), Height: r.Dy()}
	seen := map[[4]uint32]bool{}
	for y := r.Min.Y; y < r.Max.Y && len(seen) < 10000; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, ca := img.At(x, y).RGBA()
			seen[[4]uint32{cr, cg, cb, ca}] = true
		}
	}
	st.Colors = len(seen)
	return st, nil
}

// rendered is one dashboard's output.
type rendered struct {
	UID     string
	HTML    string // path
	PNG     string // path
	Results []panelResult
}

// renderOptions says what to render and where.
type renderOptions struct {
	Window       window
	RateInterval time.Duration
	Vars         map[string]string // overrides for template variables
	OutDir       string            // <uid>.png
	HTMLDir      string            // <uid>.html
	Chromium     string
	Note         string
}

// renderDashboards queries and draws every *.json dashboard in files, then screenshots it.
func renderDashboards(ctx context.Context, q querier, files fs.FS, o renderOptions) ([]rendered, error) {
	names, err := fs.Glob(files, "*.json")
	if err != nil {
		return nil, fmt.Errorf("list dashboards: %w", err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no dashboard JSON files to render")
	}
	sort.Strings(names)
	var out []rendered
	for _, name := range names {
		b, err := fs.ReadFile(files, name)
		if err != nil {
			return nil, fmt.Errorf("read dashboard %s: %w", name, err)
		}
		d, err := parseDashboard(name, b)
		if err != nil {
			return nil, err
		}
		vars, err := resolveVars(ctx, q, d, o.Window, o.RateInterval, o.Vars)
		if err != nil {
			return nil, err
		}
		results := evaluate(ctx, q, d, vars, o.Window)
		page := renderPage(pageInfo{Dashboard: d, Vars: vars, Window: o.Window, Note: o.Note}, results)
		r := rendered{UID: d.UID, HTML: filepath.Join(o.HTMLDir, d.UID+".html"), PNG: filepath.Join(o.OutDir, d.UID+".png"), Results: results}
		if err := os.WriteFile(r.HTML, []byte(page), 0o644); err != nil {
			return nil, fmt.Errorf("write %s: %w", r.HTML, err)
		}
		abs, err := filepath.Abs(r.HTML)
		if err != nil {
			return nil, fmt.Errorf("dashboard %s: %w", name, err)
		}
		if err := screenshot(ctx, o.Chromium, abs, r.PNG, pageHeight(results)); err != nil {
			return nil, fmt.Errorf("dashboard %s: %w", name, err)
		}
		out = append(out, r)
	}
	return out, nil
}
