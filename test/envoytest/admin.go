package envoytest

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ListenerAddr returns the address ("127.0.0.1:41234") the named listener is bound to, as the
// admin /listeners endpoint reports it, so templates may use port 0.
func (e *Envoy) ListenerAddr(t TB, name string) string {
	t.Helper()
	addrs, err := e.listenerAddrs()
	if err != nil {
		t.Fatalf("envoytest: %v", err)
	}
	a, ok := addrs[name]
	if !ok {
		t.Fatalf("envoytest: Envoy has no listener %q (has %v)", name, addrs)
	}
	return a
}

// ListenerAddrs returns every listener's bound address by listener name.
func (e *Envoy) ListenerAddrs(t TB) map[string]string {
	t.Helper()
	addrs, err := e.listenerAddrs()
	if err != nil {
		t.Fatalf("envoytest: %v", err)
	}
	return addrs
}

func (e *Envoy) listenerAddrs() (map[string]string, error) {
	body, err := e.adminGet("/listeners?format=json")
	if err != nil {
		return nil, err
	}
	var doc struct {
		ListenerStatuses []struct {
			Name         string `json:"name"`
			LocalAddress struct {
				SocketAddress struct {
					Address   string `json:"address"`
					PortValue int    `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("decode %s/listeners?format=json: %w", e.AdminURL, err)
	}
	out := map[string]string{}
	for _, l := range doc.ListenerStatuses {
		sa := l.LocalAddress.SocketAddress
		if sa.Address == "" {
			continue // pipe or internal listener
		}
		out[l.Name] = net.JoinHostPort(sa.Address, strconv.Itoa(sa.PortValue))
	}
	return out, nil
}

// Counters returns every integer-valued stat from /stats (counters and gauges; histograms are
// left out), by Envoy's own name.
func (e *Envoy) Counters(t TB) map[string]uint64 {
	t.Helper()
	return parseStats(string(e.AdminGet(t, "/stats")))
}

// parseStats reads Envoy's plain-text /stats format, "name: value" per line.
func parseStats(s string) map[string]uint64 {
	out := map[string]uint64{}
	for _, line := range strings.Split(s, "\n") {
		i := strings.LastIndex(line, ": ")
		if i <= 0 {
			continue
		}
		v, err := strconv.ParseUint(line[i+2:], 10, 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}
