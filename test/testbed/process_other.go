//go:build !linux

package testbed

import "syscall"

func childAttrs() *syscall.SysProcAttr { return nil }
