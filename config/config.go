// Package config defines certdrift's one YAML configuration file: desired certificate sources,
// Envoy targets (admin URL and TLS endpoints), explicit bindings, peer pairings for trust-bundle
// checks, and policy. Decoding is strict: an unknown or misspelled field is an error that names the
// field and its line.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/certdrift/certdrift/internal/boundedfile"
)

// MaxFileBytes bounds the config file; a config is hand-written and never near this.
const MaxFileBytes = 1 << 20

// Config is the whole file.
type Config struct {
	Desired  []Desired `yaml:"desired"`
	Envoys   []Envoy   `yaml:"envoys"`
	Pairings []Pairing `yaml:"pairings"`
	Policy   Policy    `yaml:"policy"`
}

// Desired is one source of desired certificates on disk.
type Desired struct {
	Name string `yaml:"name"`
	// Dir is a directory in kubelet Secret-volume layout or plain; Cert/Key/CA are key (file)
	// names inside it (defaults tls.crt, tls.key, ca.crt).
	Dir  string `yaml:"dir"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	CA   string `yaml:"ca"`
	// Merged reads every <name><cert_suffix> with its <name><key_suffix> as its own item.
	Merged *Merged `yaml:"merged"`
	// CertFile/KeyFile/CAFile are explicit paths, used instead of Dir.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	CAFile   string `yaml:"ca_file"`
}

// Merged is the "<name>.crt"/"<name>.key" layout of a merged Secret.
type Merged struct {
	CertSuffix string `yaml:"cert_suffix"`
	KeySuffix  string `yaml:"key_suffix"`
}

// Envoy is one Envoy instance outside Kubernetes.
type Envoy struct {
	Name  string `yaml:"name"`
	Admin string `yaml:"admin"` // base URL, e.g. http://127.0.0.1:9901
	// Endpoints are the TLS listeners to handshake with.
	Endpoints []Endpoint `yaml:"endpoints"`
	// Bindings tie desired sources to what this Envoy loads, overriding inference.
	Bindings []Binding `yaml:"bindings"`
}

// Endpoint is one TLS listener address and the SNIs to ask it for.
type Endpoint struct {
	Address string   `yaml:"address"` // host:port
	SNI     []string `yaml:"sni"`
	ALPN    []string `yaml:"alpn"`
	// Source (and Item) name the desired certificate this endpoint must serve; when empty it is
	// inferred from the Envoy's listeners and bindings.
	Source string `yaml:"source"`
	Item   string `yaml:"item"`
	// ClientCert is presented to mTLS listeners.
	ClientCert *ClientCert `yaml:"client_cert"`
}

// ClientCert is a certificate and key presented in a handshake.
type ClientCert struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Binding says that an Envoy must load a desired source under an SDS secret name or a file path.
type Binding struct {
	Source string `yaml:"source"`
	Item   string `yaml:"item"`
	Secret string `yaml:"secret"` // SDS secret name as in config_dump
	File   string `yaml:"file"`   // certificate path as in /certs or config_dump
	// CAFile is where the Envoy reads this source's CA bundle (its ca.crt), as /certs
	// (ca_cert path) or config_dump (trusted_ca filename) print it: it binds the source's
	// desired bundle to the validation contexts that load it. Kubernetes mode sets it from the
	// pod's mounts; a CA-only source (a ConfigMap, an Opaque Secret holding only ca.crt) has a
	// CAFile and no File.
	CAFile string `yaml:"ca_file"`
	// Dir is the directory the Envoy sees the source in (a Secret volume's mount path): an SDS
	// watched_directory equal to it ties the secrets read from there, certificate and
	// validation context alike, to this source.
	Dir string `yaml:"dir"`
	// Origin is set by discovery (Kubernetes mode: "path", "sds-name"), never by a file; empty
	// means the binding is explicit configuration.
	Origin string `yaml:"-"`
}

// Pairing declares that the trust bundle of one source must accept the leaf of another (e.g. a
// proxy's CA bundle must verify the control plane's serving certificate).
type Pairing struct {
	Name   string `yaml:"name"`
	Bundle Ref    `yaml:"bundle"` // whose CA bundle
	Leaf   Ref    `yaml:"leaf"`   // whose certificate
	// Mutual also checks the reverse (leaf's bundle accepts bundle's leaf), as mTLS needs. Parse
	// expands it into a second pairing, so the checks see only one-way pairings.
	Mutual bool `yaml:"mutual"`
}

// Ref points at a desired source (and merged item).
type Ref struct {
	Source string `yaml:"source"`
	Item   string `yaml:"item"`
}

// Policy holds thresholds. Durations are Go durations ("720h").
type Policy struct {
	// A certificate is EXPIRING (warning) when at most ExpiringWarning is left AND at most
	// ExpiringWarningLifetimePercent of its lifetime (not_after - not_before); critical likewise.
	// The lifetime condition keeps a healthy renewer quiet: cert-manager renews when a third of
	// the lifetime is left (30 days of a 90-day certificate), so an absolute 30 days alone fires
	// on every certificate it is about to renew on schedule, and on every short-lived one (Istio's
	// 24-hour workload certificates) all the time. See docs/findings.md, EXPIRING.
	ExpiringWarning  Duration `yaml:"expiring_warning"`
	ExpiringCritical Duration `yaml:"expiring_critical"`
	// Percent of the lifetime, 1..100; 100 turns the lifetime condition off.
	ExpiringWarningLifetimePercent  int `yaml:"expiring_warning_lifetime_percent"`
	ExpiringCriticalLifetimePercent int `yaml:"expiring_critical_lifetime_percent"`
	// Grace is how long a rotation may take to reach Envoy before drift is reported (kubelet sync
	// plus SDS debounce).
	Grace        Duration `yaml:"grace"`
	MaxBundleCAs int      `yaml:"max_bundle_cas"`
	MinRSABits   int      `yaml:"min_rsa_bits"`
	// Timeout bounds each admin request and each handshake.
	Timeout Duration `yaml:"timeout"`
}

// Defaults applied to a zero Policy field.
var DefaultPolicy = Policy{
	ExpiringWarning:  Duration(30 * 24 * time.Hour),
	ExpiringCritical: Duration(7 * 24 * time.Hour),
	// Half and a quarter of cert-manager's renewal window (a third of the lifetime): a renewal
	// overdue by half its window warns, by three quarters is critical. For a 90-day certificate
	// that is 14.4 and 7 days (the absolute 7 days comes first), for Istio's 24-hour ones 3.8 and
	// 1.9 hours, for a 1-year certgen certificate the absolute 30 and 7 days.
	ExpiringWarningLifetimePercent:  16,
	ExpiringCriticalLifetimePercent: 8,
	Grace:                           Duration(2 * time.Minute),
	MaxBundleCAs:                    2,
	MinRSABits:                      2048,
	Timeout:                         Duration(5 * time.Second),
}

// Duration is a time.Duration written as "90s" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	// A *yaml.TypeError lets the decoder go on to the next field, so one bad duration does not
	// hide the errors after it.
	bad := func(format string, a ...any) error {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: ", n.Line) + fmt.Sprintf(format, a...)}}
	}
	var s string
	if n.Kind != yaml.ScalarNode || n.Decode(&s) != nil {
		return bad("duration must be a string like \"90s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return bad("%v", err)
	}
	if v < 0 {
		return bad("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Load reads and validates the file at path.
func Load(path string) (*Config, error) { return load(path, Parse) }

// LoadCluster reads the configuration of the Kubernetes mode: the cluster supplies the desired
// certificates and the Envoys, so the file holds only pairings and policy (see ParseCluster).
func LoadCluster(path string) (*Config, error) { return load(path, ParseCluster) }

func load(path string, parse func([]byte) (*Config, error)) (*Config, error) {
	// boundedfile: a FIFO or a device given as --config must fail at once, never hang a reload.
	data, _, err := boundedfile.Read(path, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := parse(data)
	if err != nil {
		return nil, &FileError{Path: path, Err: err}
	}
	return c, nil
}

// Parse decodes strictly, applies defaults and validates. Its error, when the file is YAML, is
// Errors: every problem at once, each with its line and field.
func Parse(data []byte) (*Config, error) {
	return parse(data, (*Config).Validate)
}

// ParseCluster is Parse for the Kubernetes mode: desired and envoys are refused (they come from
// the cluster), and pairing sources name Secrets as "namespace/name".
func ParseCluster(data []byte) (*Config, error) {
	return parse(data, (*Config).ValidateCluster)
}

func parse(data []byte, validate func(*Config) error) (*Config, error) {
	c, x, terr, err := decode(data)
	if err != nil {
		return nil, err
	}
	if err := x.collect(terr, validate(c)); err != nil {
		return nil, err
	}
	return c, nil
}

// decode decodes strictly but goes on past values of the wrong type, unknown fields and bad
// durations (all *yaml.TypeError), returning them with an index of the file to place them. err is
// for what stops decoding: a syntax error, an empty file, a second document.
func decode(data []byte) (*Config, *fileIndex, *yaml.TypeError, error) {
	var root yaml.Node
	nd := yaml.NewDecoder(bytes.NewReader(data))
	if err := nd.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, nil, errors.New("config is empty")
		}
		return nil, nil, nil, Errors{syntaxError(data, err)}
	}
	var extra yaml.Node
	if err := nd.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, nil, nil, errors.New("config holds more than one YAML document")
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Config
	var terr *yaml.TypeError
	if err := dec.Decode(&c); err != nil {
		if !errors.As(err, &terr) {
			return nil, nil, nil, err
		}
	}
	c.applyDefaults()
	c.expandMutual()
	return &c, indexFile(&root), terr, nil
}

// expandMutual adds the reverse of every mutual pairing: in mTLS each side's bundle must accept
// the other side's leaf.
func (c *Config) expandMutual() {
	for _, p := range c.Pairings {
		if p.Mutual {
			r := Pairing{Name: p.Name, Bundle: p.Leaf, Leaf: p.Bundle}
			if r.Name != "" {
				r.Name += " (reverse)"
			}
			c.Pairings = append(c.Pairings, r)
		}
	}
	for i := range c.Pairings {
		c.Pairings[i].Mutual = false
	}
}

func (c *Config) applyDefaults() {
	p, d := &c.Policy, DefaultPolicy
	if p.ExpiringWarning == 0 {
		p.ExpiringWarning = d.ExpiringWarning
	}
	if p.ExpiringCritical == 0 {
		p.ExpiringCritical = d.ExpiringCritical
	}
	if p.ExpiringWarningLifetimePercent == 0 {
		p.ExpiringWarningLifetimePercent = d.ExpiringWarningLifetimePercent
	}
	if p.ExpiringCriticalLifetimePercent == 0 {
		p.ExpiringCriticalLifetimePercent = d.ExpiringCriticalLifetimePercent
	}
	if p.Grace == 0 {
		p.Grace = d.Grace
	}
	if p.MaxBundleCAs == 0 {
		p.MaxBundleCAs = d.MaxBundleCAs
	}
	if p.MinRSABits == 0 {
		p.MinRSABits = d.MinRSABits
	}
	if p.Timeout == 0 {
		p.Timeout = d.Timeout
	}
}
