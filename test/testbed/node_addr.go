package testbed

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
)

// Every node owns one /24 of loopback addresses, subnet N:
//
//	127.0.N.1     the node's InternalIP (hostIP), where its kubelet endpoint listens
//	127.0.N.M     pod IPs (M = 2..254): listeners on 0.0.0.0 or the pod IP bind here
//	127.1.N.M     the pod's private "localhost": listeners on 127.0.0.1 bind here, and only
//	              the node agent (DialPod, port-forward) knows it
//
// Pods' ports are fixed by their manifests (8443, 15000, ...), so two testbeds on one machine
// (parallel test packages, other engineers' runs) must never share a subnet. A subnet is
// claimed by holding an exclusive flock on a file named after it; the kernel drops the lock when
// the process dies, so a crashed test never leaks a claim.
var loopbackLockDir = filepath.Join(os.TempDir(), "certdrift-testbed-loopback")

// subnetClaim is one held /24.
type subnetClaim struct {
	n    byte
	lock *os.File
}

func claimSubnet() (*subnetClaim, error) {
	if err := os.MkdirAll(loopbackLockDir, 0o777); err != nil {
		return nil, fmt.Errorf("claim a loopback subnet: create %s: %w", loopbackLockDir, err)
	}
	// Start at a random subnet so that concurrent claimers rarely contend; 127.0.0.x is left
	// alone because everything else on the machine lives there.
	start := rand.IntN(250)
	for i := range 250 {
		n := byte(1 + (start+i)%250)
		path := filepath.Join(loopbackLockDir, fmt.Sprintf("127.0.%d.lock", n))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return nil, fmt.Errorf("claim a loopback subnet: open %s: %w", path, err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &subnetClaim{n: n, lock: f}, nil
		}
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("claim a loopback subnet: lock %s: %w", path, err)
		}
	}
	return nil, errors.New("claim a loopback subnet: all 250 subnets 127.0.1-250.0/24 are held by other testbeds")
}

func (c *subnetClaim) release() {
	if c != nil && c.lock != nil {
		c.lock.Close() // closing the last descriptor drops the flock
	}
}

func (c *subnetClaim) hostIP() netip.Addr { return netip.AddrFrom4([4]byte{127, 0, c.n, 1}) }

// podIP and localIP are pod number m's public and private addresses (m in 2..254).
func (c *subnetClaim) podIP(m byte) netip.Addr   { return netip.AddrFrom4([4]byte{127, 0, c.n, m}) }
func (c *subnetClaim) localIP(m byte) netip.Addr { return netip.AddrFrom4([4]byte{127, 1, c.n, m}) }
