package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Check is the verdict on one configuration file, loaded the way a command would load it
// (`--config.check` of audit and serve): in Kubernetes mode the file holds only pairings and
// policy (LoadCluster). Its JSON is the document `--config.check -o json` prints, valid or not.
type Check struct {
	Valid          bool         `json:"valid"`
	File           string       `json:"file"`
	Mode           string       `json:"mode"` // local or kubernetes
	DesiredSources int          `json:"desired_sources"`
	Envoys         int          `json:"envoys"`
	Pairings       int          `json:"pairings"`
	Errors         []CheckError `json:"errors"`
	// Err is why the file is not valid (nil when it is), as Load returned it: "config FILE is
	// invalid: …", one problem a line when there are several (FileError).
	Err error `json:"-"`
}

// CheckError is one problem of a Check, at its place in the file when known.
type CheckError struct {
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// CheckFile loads and validates path without contacting anything; cluster is Kubernetes mode.
func CheckFile(path string, cluster bool) Check {
	load, mode := Load, "local"
	if cluster {
		load, mode = LoadCluster, "kubernetes"
	}
	cfg, err := load(path)
	c := Check{Valid: err == nil, File: path, Mode: mode, Errors: []CheckError{}, Err: err}
	if err != nil {
		c.Errors = checkErrors(err)
		return c
	}
	c.DesiredSources, c.Envoys, c.Pairings = len(cfg.Desired), len(cfg.Envoys), len(cfg.Pairings)
	return c
}

// Summary is the one-line verdict on a valid file: what it configures.
func (c Check) Summary() string {
	if c.Mode == "kubernetes" {
		return "config OK (Kubernetes mode): " + plural(c.Pairings, "pairing")
	}
	return fmt.Sprintf("config OK: %s, %s", plural(c.DesiredSources, "desired source"), plural(c.Envoys, "envoy"))
}

// WriteJSON writes the verdict as one indented JSON document.
func (c Check) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(c)
}

func checkErrors(err error) []CheckError {
	var es Errors
	if errors.As(err, &es) {
		out := make([]CheckError, len(es))
		for i, e := range es {
			out[i] = CheckError{Line: e.Line, Column: e.Column, Field: e.Field, Message: e.Msg}
		}
		return out
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return []CheckError{{Line: fe.Line, Column: fe.Column, Field: fe.Field, Message: fe.Msg}}
	}
	return []CheckError{{Message: err.Error()}}
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
