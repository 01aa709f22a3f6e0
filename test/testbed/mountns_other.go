//go:build !linux

package testbed

import (
	"errors"
	"os/exec"
)

type bindMount struct {
	source, target string
	readOnly       bool
}

func startInMountNamespace(*exec.Cmd, []bindMount) (<-chan error, error) {
	return nil, errors.New("certdrift containers need a Linux mount namespace for their service-account token")
}
