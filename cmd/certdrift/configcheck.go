package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/certdrift/certdrift/config"
)

// configCheck is `--config.check` of audit and serve: load and validate the file the way the
// command would (the Kubernetes mode's file holds only pairings and policy), print the verdict
// and exit 0 or 2 without contacting anything. Flags were validated by kong before this runs.
// With -o json the verdict is one JSON document on stdout, valid or not, for scripts and CI.
func configCheck(io *streams, path string, kube, asJSON bool) error {
	load, mode := config.Load, "local"
	if kube {
		load, mode = config.LoadCluster, "kubernetes"
	}
	cfg, err := load(path)
	if asJSON {
		v := checkVerdict{Valid: err == nil, File: path, Mode: mode, Errors: []checkError{}}
		if err == nil {
			v.DesiredSources, v.Envoys, v.Pairings = len(cfg.Desired), len(cfg.Envoys), len(cfg.Pairings)
		} else {
			v.Errors = checkErrors(err)
		}
		enc := json.NewEncoder(io.Out)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if werr := enc.Encode(v); werr != nil {
			return noRun(fmt.Errorf("write config check: %w", werr))
		}
		if err != nil {
			return &exitError{code: exitNoRun, err: err, silent: true}
		}
		return nil
	}
	if err != nil {
		// "config FILE is invalid: …", one problem a line when there are several (config.FileError).
		fmt.Fprintln(io.Err, err)
		return &exitError{code: exitNoRun, err: err, silent: true}
	}
	var werr error
	if kube {
		_, werr = fmt.Fprintf(io.Out, "config OK (Kubernetes mode): %s\n", plural(len(cfg.Pairings), "pairing"))
	} else {
		_, werr = fmt.Fprintf(io.Out, "config OK: %s, %s\n", plural(len(cfg.Desired), "desired source"), plural(len(cfg.Envoys), "envoy"))
	}
	return werr
}

// checkVerdict is the JSON of --config.check -o json.
type checkVerdict struct {
	Valid          bool         `json:"valid"`
	File           string       `json:"file"`
	Mode           string       `json:"mode"` // local or kubernetes
	DesiredSources int          `json:"desired_sources"`
	Envoys         int          `json:"envoys"`
	Pairings       int          `json:"pairings"`
	Errors         []checkError `json:"errors"`
}

type checkError struct {
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

func checkErrors(err error) []checkError {
	var es config.Errors
	if errors.As(err, &es) {
		out := make([]checkError, len(es))
		for i, e := range es {
			out[i] = checkError{Line: e.Line, Column: e.Column, Field: e.Field, Message: e.Msg}
		}
		return out
	}
	var fe *config.FieldError
	if errors.As(err, &fe) {
		return []checkError{{Line: fe.Line, Column: fe.Column, Field: fe.Field, Message: fe.Msg}}
	}
	return []checkError{{Message: err.Error()}}
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
