//go:build !linux

package testbed

import (
	"os/exec"
	"syscall"
)

func childAttrs() *syscall.SysProcAttr { return nil }

func startChild(cmd *exec.Cmd) error { return cmd.Start() }
