package envoyadmin

import (
	"encoding/json"
	"errors"
	"net"
	"strconv"
)

// AdminAddressFromBootstrap returns the "host:port" of the admin listener in an Envoy bootstrap in
// JSON (convert YAML first), for discovery from a pod spec's --config-yaml or a config file. Both
// protojson field styles are accepted. Only the admin section is read, so bootstraps full of
// extensions unknown to certdrift are fine.
func AdminAddressFromBootstrap(bootstrapJSON []byte) (string, error) {
	type socketAddress struct {
		Address    string          `json:"address"`
		PortValue  json.RawMessage `json:"port_value"`
		PortValue2 json.RawMessage `json:"portValue"`
	}
	type address struct {
		SocketAddress  *socketAddress `json:"socket_address"`
		SocketAddress2 *socketAddress `json:"socketAddress"`
		Pipe           *struct {
			Path string `json:"path"`
		} `json:"pipe"`
	}
	var b struct {
		Admin *struct {
			Address *address `json:"address"`
		} `json:"admin"`
	}
	if err := json.Unmarshal(bootstrapJSON, &b); err != nil {
		return "", jsonErr("parse bootstrap", err)
	}
	if b.Admin == nil || b.Admin.Address == nil {
		return "", errors.New("parse bootstrap: no admin address")
	}
	a := b.Admin.Address
	if a.Pipe != nil && a.Pipe.Path != "" {
		return a.Pipe.Path, nil
	}
	sa := a.SocketAddress
	if sa == nil {
		sa = a.SocketAddress2
	}
	if sa == nil || sa.Address == "" {
		return "", errors.New("parse bootstrap: admin address is not a socket address")
	}
	raw := sa.PortValue
	if len(raw) == 0 {
		raw = sa.PortValue2
	}
	var port json.Number
	if err := json.Unmarshal(raw, &port); err != nil {
		var s string // protojson may quote numbers
		if json.Unmarshal(raw, &s) != nil {
			return "", errors.New("parse bootstrap: admin port_value missing or not a number")
		}
		port = json.Number(s)
	}
	p, err := strconv.ParseUint(string(port), 10, 16)
	if err != nil {
		return "", errors.New("parse bootstrap: admin port_value is not a port")
	}
	return net.JoinHostPort(sa.Address, strconv.FormatUint(p, 10)), nil
}
