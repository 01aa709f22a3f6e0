// Package candidate reads what `certdrift preflight` is asked about: a candidate leaf (with its
// chain) or CA bundle for a desired source, from PEM files or from a Secret manifest as
// `kubectl create secret tls … --dry-run=client -o yaml` writes it. It is input, like probe/files:
// bounded reads, hostile-input parsing (pki), and nothing of a Secret but tls.crt, ca.crt and the
// public half of tls.key is kept — the private key is dropped once parsed (pki.ParsePrivateKey),
// and no error repeats a value from the manifest.
package candidate

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/certdrift/certdrift/internal/boundedfile"
	"github.com/certdrift/certdrift/pki"
	"github.com/certdrift/certdrift/probe/desired"
)

// maxFileBytes bounds one input file: a manifest of a few Secrets with bundles fits many times.
const maxFileBytes = 4 << 20

// maxDocuments bounds the Secrets of one manifest.
const maxDocuments = 64

// Spec is one argument as given: SOURCE=FILE, or for a Secret manifest FILE alone (the Secret
// names itself).
type Spec struct {
	Source string
	Path   string
}

// ParseSpec splits "SOURCE=FILE". With needSource false a bare FILE is accepted (a Secret
// manifest names its source); an argument that names an existing file is taken as the file even
// if it holds "=".
func ParseSpec(arg string, needSource bool) (Spec, error) {
	if _, err := os.Stat(arg); err == nil && !needSource {
		return Spec{Path: arg}, nil
	}
	source, path, ok := strings.Cut(arg, "=")
	switch {
	case !ok && needSource:
		return Spec{}, fmt.Errorf("%q: want SOURCE=FILE (the desired source's name as audit prints it, then the PEM file)", arg)
	case !ok:
		return Spec{Path: arg}, nil
	case source == "" || path == "":
		return Spec{}, fmt.Errorf("%q: want SOURCE=FILE with neither part empty", arg)
	}
	return Spec{Source: source, Path: path}, nil
}

// Leaf reads a candidate leaf: the first certificate of the file is the leaf, the rest its chain.
func Leaf(s Spec) (desired.Candidate, error) {
	certs, err := readPEM(s.Path)
	if err != nil {
		return desired.Candidate{}, err
	}
	return desired.Candidate{Source: s.Source, From: s.Path, Chain: certs}, nil
}

// Bundle reads a candidate CA bundle: every certificate of the file.
func Bundle(s Spec) (desired.Candidate, error) {
	certs, err := readPEM(s.Path)
	if err != nil {
		return desired.Candidate{}, err
	}
	return desired.Candidate{Source: s.Source, From: s.Path, Bundle: certs}, nil
}

// Leaves reads each SOURCE=FILE argument as a candidate leaf (Leaf), in order.
func Leaves(args []string) ([]desired.Candidate, error) { return readArgs(args, true, one(Leaf)) }

// Bundles reads each SOURCE=FILE argument as a candidate CA bundle (Bundle), in order.
func Bundles(args []string) ([]desired.Candidate, error) { return readArgs(args, true, one(Bundle)) }

// SecretManifests reads each [SOURCE=]FILE argument as a Secret manifest (Secrets), in order.
func SecretManifests(args []string, kube bool) ([]desired.Candidate, error) {
	return readArgs(args, false, func(s Spec) ([]desired.Candidate, error) { return Secrets(s, kube) })
}

// readArgs parses and reads each argument; the first problem stops it.
func readArgs(args []string, needSource bool, read func(Spec) ([]desired.Candidate, error)) ([]desired.Candidate, error) {
	var all []desired.Candidate
	for _, a := range args {
		s, err := ParseSpec(a, needSource)
		if err != nil {
			return nil, err
		}
		cs, err := read(s)
		if err != nil {
			return nil, err
		}
		all = append(all, cs...)
	}
	return all, nil
}

func one(read func(Spec) (desired.Candidate, error)) func(Spec) ([]desired.Candidate, error) {
	return func(s Spec) ([]desired.Candidate, error) {
		c, err := read(s)
		return []desired.Candidate{c}, err
	}
}

func readPEM(path string) ([]*x509.Certificate, error) {
	data, _, err := boundedfile.Read(path, maxFileBytes)
	if err != nil {
		return nil, err
	}
	certs, err := pki.ParseCertificates(data, pki.Limits{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return certs, nil
}

// Secrets reads a Secret manifest (one or more YAML documents, each a v1 Secret) into one
// candidate per Secret: tls.crt as the leaf and chain, ca.crt as the bundle. The source is
// s.Source when given (one Secret only), else namespace/name in Kubernetes mode and the name in
// local mode (the config's source name).
func Secrets(s Spec, kube bool) ([]desired.Candidate, error) {
	data, _, err := boundedfile.Read(s.Path, maxFileBytes)
	if err != nil {
		return nil, err
	}
	return secretsFrom(data, s, kube)
}

// secretsFrom is Secrets on the bytes of the manifest.
func secretsFrom(data []byte, s Spec, kube bool) ([]desired.Candidate, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []desired.Candidate
	for doc := 1; ; doc++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d is not YAML (%s)", s.Path, doc, yamlPlace(err))
		}
		if doc > maxDocuments {
			return nil, fmt.Errorf("%s: more than %d documents", s.Path, maxDocuments)
		}
		if len(n.Content) == 0 || (n.Content[0].Kind == yaml.ScalarNode && n.Content[0].Tag == "!!null") {
			continue // an empty document ("---" at the end)
		}
		c, err := secret(n.Content[0], s, kube)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", s.Path, doc, err)
		}
		out = append(out, c)
	}
	switch {
	case len(out) == 0:
		return nil, fmt.Errorf("%s: no Secret in the file", s.Path)
	case len(out) > 1 && s.Source != "":
		return nil, fmt.Errorf("%s: %d Secrets in the file, but one source name (%s) given: give the file alone and let each Secret name itself", s.Path, len(out), s.Source)
	}
	return out, nil
}

// yamlPlace is where the YAML parser stopped, without the parser's message, which may quote the
// document (and a manifest holds a private key).
func yamlPlace(err error) string {
	if m := lineRE.FindString(err.Error()); m != "" {
		return m
	}
	return "no position given"
}

var lineRE = regexp.MustCompile(`line \d+`)

// secret reads one Secret document. Only the names of fields are ever put in an error, never a
// value: the same document carries tls.key.
func secret(n *yaml.Node, s Spec, kube bool) (desired.Candidate, error) {
	if n.Kind != yaml.MappingNode {
		return desired.Candidate{}, fmt.Errorf("line %d: want a Secret (a mapping)", n.Line)
	}
	top := fields(n)
	if k := scalar(top["kind"]); k != "Secret" {
		return desired.Candidate{}, fmt.Errorf("line %d: kind %q, want Secret (a manifest as kubectl create secret … --dry-run=client -o yaml writes it)", n.Line, trunc(k))
	}
	if v := scalar(top["apiVersion"]); v != "v1" {
		return desired.Candidate{}, fmt.Errorf("line %d: apiVersion %q, want v1", n.Line, trunc(v))
	}
	meta := fields(top["metadata"])
	name, ns := scalar(meta["name"]), scalar(meta["namespace"])
	if name == "" && s.Source == "" {
		return desired.Candidate{}, fmt.Errorf("line %d: metadata.name is missing (or give SOURCE=FILE)", n.Line)
	}
	where := "Secret " + name
	if ns != "" {
		where = "Secret " + ns + "/" + name
	}
	source := s.Source
	if source == "" {
		source = name
		if kube {
			if ns == "" {
				return desired.Candidate{}, fmt.Errorf("%s: metadata.namespace is missing: add it (kubectl create secret … -n NAMESPACE) or give NAMESPACE/NAME=FILE", where)
			}
			source = ns + "/" + name
		}
	}
	c := desired.Candidate{Source: source, From: s.Path}
	values := map[string][]byte{}
	for _, field := range []string{"data", "stringData"} {
		node := top[field]
		if node == nil {
			continue
		}
		if node.Kind != yaml.MappingNode {
			return desired.Candidate{}, fmt.Errorf("%s: line %d: %s is not a mapping", where, node.Line, field)
		}
		m := fields(node)
		for _, key := range []string{"tls.crt", "ca.crt", "tls.key"} {
			v := m[key]
			if v == nil {
				continue
			}
			if v.Kind != yaml.ScalarNode {
				return desired.Candidate{}, fmt.Errorf("%s: line %d: %s.%s is not a string", where, v.Line, field, key)
			}
			b := []byte(v.Value)
			if field == "data" {
				var err error
				if b, err = base64.StdEncoding.DecodeString(strings.Join(strings.Fields(v.Value), "")); err != nil {
					return desired.Candidate{}, fmt.Errorf("%s: line %d: data.%s is not base64", where, v.Line, key)
				}
			}
			values[key] = b
		}
	}
	if key, ok := values["tls.key"]; ok {
		delete(values, "tls.key")
		// Only its public half is kept: whether Envoy would accept the pair is judged, like
		// audit's KEY_MISMATCH. The error is pki's, which never quotes its input.
		info, err := pki.ParsePrivateKey(key, pki.Limits{})
		clear(key)
		if err != nil {
			c.KeyErr = fmt.Errorf("%s: tls.key: %w", where, err)
		} else {
			c.Key = &info
		}
	}
	if len(values) == 0 {
		return desired.Candidate{}, fmt.Errorf("%s holds neither tls.crt nor ca.crt in data or stringData", where)
	}
	for _, key := range slices.Sorted(maps.Keys(values)) {
		certs, err := pki.ParseCertificates(values[key], pki.Limits{})
		if err != nil {
			return desired.Candidate{}, fmt.Errorf("%s: %s: %w", where, key, err)
		}
		if key == "tls.crt" {
			c.Chain = certs
		} else {
			c.Bundle = certs
		}
	}
	return c, nil
}

func fields(n *yaml.Node) map[string]*yaml.Node {
	m := map[string]*yaml.Node{}
	if n == nil || n.Kind != yaml.MappingNode {
		return m
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		m[n.Content[i].Value] = n.Content[i+1]
	}
	return m
}

func scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Merge joins the candidates of one source (a leaf from one file, its bundle from another) and
// refuses two leaves or two bundles for the same source: which one was meant cannot be told.
func Merge(cs []desired.Candidate) ([]desired.Candidate, error) {
	var out []desired.Candidate
	idx := map[[2]string]int{}
	for _, c := range cs {
		k := [2]string{c.Source, c.Item}
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, c)
			continue
		}
		m := &out[i]
		if c.Chain != nil {
			if m.Chain != nil {
				return nil, fmt.Errorf("source %s: two candidate leaves (%s and %s)", c.Source, m.From, c.From)
			}
			m.Chain = c.Chain
			m.Key, m.KeyErr = c.Key, c.KeyErr // a key goes with the leaf it was given beside
		}
		if c.Bundle != nil {
			if m.Bundle != nil {
				return nil, fmt.Errorf("source %s: two candidate bundles (%s and %s)", c.Source, m.From, c.From)
			}
			m.Bundle = c.Bundle
		}
		if m.From != c.From {
			m.From += ", " + c.From
		}
	}
	return out, nil
}
