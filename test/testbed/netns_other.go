//go:build !linux

package testbed

import (
	"context"
	"errors"
	"net"
	"os/exec"
)

type netNS struct{}

var errNoNetNS = errors.New("host-process control planes need a Linux network namespace")

func newNetNS() (*netNS, error)                                              { return nil, errNoNetNS }
func (*netNS) Dial(context.Context, string) (net.Conn, error)                { return nil, errNoNetNS }
func (*netNS) forwardIn(string, string) error                                { return errNoNetNS }
func (*netNS) Close() error                                                  { return nil }
func startInNamespaces(*exec.Cmd, []bindMount, *netNS) (<-chan error, error) { return nil, errNoNetNS }
