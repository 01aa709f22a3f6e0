package main

import (
	"fmt"

	"github.com/certdrift/certdrift/config"
)

// configCheck is `--config.check` of audit and serve: config.CheckFile's verdict printed, exit 0
// or 2, without contacting anything. Flags were validated by kong before this runs. With -o json
// the verdict is one JSON document on stdout, valid or not, for scripts and CI.
func configCheck(io *streams, path string, kube, asJSON bool) error {
	v := config.CheckFile(path, kube)
	switch {
	case asJSON:
		if err := v.WriteJSON(io.Out); err != nil {
			return noRun(fmt.Errorf("write config check: %w", err))
		}
	case v.Err != nil:
		fmt.Fprintln(io.Err, v.Err)
	default:
		_, err := fmt.Fprintln(io.Out, v.Summary())
		return err
	}
	if v.Err != nil {
		return &exitError{code: exitNoRun, err: v.Err, silent: true}
	}
	return nil
}
