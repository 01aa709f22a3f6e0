package exporter

import (
	"fmt"
	"path/filepath"

	"github.com/prometheus/exporter-toolkit/web"
	"gopkg.in/yaml.v3"

	"github.com/certdrift/certdrift/config"
	"github.com/certdrift/certdrift/internal/boundedfile"
	"github.com/certdrift/certdrift/pki"
)

// ValidateWebConfig checks Web.ConfigFile before Run serves with it: the files it names are
// read with limits (checkWebConfigFiles), then exporter-toolkit validates the configuration.
func ValidateWebConfig(path string) error {
	if err := checkWebConfigFiles(path); err != nil {
		return err
	}
	return web.Validate(path)
}

// checkWebConfigFiles reads the exporter-toolkit web configuration and the certificate files it
// names through boundedfile before web.Validate reads them with os.ReadFile, which blocks on a
// FIFO and has no size limit. exporter-toolkit reads these files again on every request and TLS
// handshake with os.ReadFile (so that rotated certificates apply without a restart); that path is
// the toolkit's and cannot be routed here without forking it, so a file replaced by a FIFO after
// start stalls those requests (never the rounds, the probe port or shutdown): see docs/operate.md.
func checkWebConfigFiles(path string) error {
	data, _, err := boundedfile.Read(path, config.MaxFileBytes)
	if err != nil {
		return err
	}
	var wc struct {
		TLS struct {
			CertFile     string `yaml:"cert_file"`
			KeyFile      string `yaml:"key_file"`
			ClientCAFile string `yaml:"client_ca_file"`
		} `yaml:"tls_server_config"`
	}
	// Not strict and errors ignored: web.Validate, next, judges the file; this only finds paths.
	_ = yaml.Unmarshal(data, &wc)
	for _, f := range []struct{ field, path string }{
		{"tls_server_config.cert_file", wc.TLS.CertFile},
		{"tls_server_config.key_file", wc.TLS.KeyFile},
		{"tls_server_config.client_ca_file", wc.TLS.ClientCAFile},
	} {
		if f.path == "" {
			continue
		}
		p := f.path
		if !filepath.IsAbs(p) {
			// As the toolkit does (TLSConfig.SetDirectory): relative to the web config's directory.
			p = filepath.Join(filepath.Dir(path), p)
		}
		if _, _, err := boundedfile.Read(p, int64(pki.DefaultLimits.MaxBytes)); err != nil {
			return fmt.Errorf("%s: %w", f.field, err)
		}
	}
	return nil
}
