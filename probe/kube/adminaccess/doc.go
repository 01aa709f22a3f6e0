// Package adminaccess reaches the admin endpoint of each Envoy that discovery found, directly or
// through the API server's port-forward.
//
// # Routes and the RBAC each needs
//
// Dialer.Open returns a base URL and an *http.Client for one target, to pass to
// envoyadmin.New(conn.BaseURL, envoyadmin.Options{HTTPClient: conn.HTTPClient}).
//
//   - direct: HTTP to podIP:adminPort. Needs network reach to pod IPs and an admin that
//     listens on the pod IP; no RBAC beyond discovery.
//   - port-forward: through the API server's pods/portforward subresource, WebSocket first
//     (SPDY tunnelled over WebSocket, as kubectl does since 1.31) with SPDY as fallback. Each
//     TCP connection of the HTTP client is one port-forward stream pair on a session kept per
//     pod, closed after IdleTimeout unused, by CloseIdle at the end of a round, or by Close.
//     No local port is opened. Needs create on pods/portforward in the pod's namespace (the
//     SPDY POST); the WebSocket upgrade is a GET, authorized as get on pods/portforward (seen
//     on kube-apiserver 1.36), so grant create and get. With create alone every session
//     costs a refused WebSocket attempt before SPDY succeeds.
//   - auto (default): direct when the target's admin is not localhost-only and a TCP connect
//     to it succeeds within DialTimeout; else port-forward.
package adminaccess
