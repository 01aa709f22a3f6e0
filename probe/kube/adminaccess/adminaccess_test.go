package adminaccess

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certdrift/certdrift/probe/envoyadmin"
	"github.com/certdrift/certdrift/probe/kube"
	"github.com/certdrift/certdrift/probe/kube/discovery"
	"github.com/certdrift/certdrift/probe/kube/internal/kubetest"
)

// discoverSet runs a namespace-scoped discovery of set's namespace with cfg's identity and
// returns its targets by owner name.
func discoverSet(t *testing.T, d *discovery.Discovery) (map[string]kube.EnvoyTarget, discovery.Snapshot) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.WaitSynced(ctx); err != nil {
		t.Fatalf("WaitSynced: %v", err)
	}
	snap := d.Targets(ctx)
	out := map[string]kube.EnvoyTarget{}
	for _, tg := range snap.Targets {
		out[tg.Owner.Name] = tg
	}
	if len(out) != 3 {
		t.Fatalf("discovered %d targets %v, want the 3 Envoys", len(out), snap.Targets)
	}
	return out, snap
}

// checkSnapshot reads the Envoy admin through conn with envoyadmin and checks that /certs shows
// the leaf serial the Secret holds.
func checkSnapshot(t *testing.T, conn *Conn, set kubetest.EnvoySet, owner string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := envoyadmin.New(conn.BaseURL, envoyadmin.Options{HTTPClient: conn.HTTPClient})
	if err != nil {
		t.Fatalf("envoyadmin.New(%s): %v", conn.BaseURL, err)
	}
	snap := c.Snapshot(ctx)
	if snap.CertsErr != nil || snap.ConfigErr != nil || snap.StatsErr != nil || snap.ServerInfoErr != nil {
		t.Fatalf("%s snapshot through %s (%s): certs %v config %v stats %v server_info %v", owner, conn.Route, conn.BaseURL,
			snap.CertsErr, snap.ConfigErr, snap.StatsErr, snap.ServerInfoErr)
	}
	want := set.Leaves[owner].Cert.SerialNumber
	var serials []string
	found := false
	for _, tc := range snap.Contexts {
		for _, cd := range tc.Chain {
			serials = append(serials, cd.SerialText)
			found = found || (cd.Serial != nil && cd.Serial.Cmp(want) == 0)
		}
	}
	if !found {
		t.Errorf("%s /certs through %s shows serials %v, want the Secret's %x", owner, conn.Route, serials, want)
	}
	if snap.ServerVersion == "" {
		t.Errorf("%s: no server version through %s", owner, conn.Route)
	}
}

// startDiscovery runs a discovery until the test ends (as discovery's own tests do).
func startDiscovery(t *testing.T, cfg *rest.Config, opts discovery.Options) *discovery.Discovery {
	t.Helper()
	d, err := discovery.New(cfg, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	kubetest.RunUntilCleanup(t, "discovery", d.Run)
	return d
}

// TestAdminAccess reaches the admin of each preset's Envoy: auto goes direct to the one on the
// pod IP and through the API server's port-forward to the localhost-only ones, and envoyadmin
// reads /certs with each Secret's serial through every route; sessions are reused per pod and
// closed when idle; direct mode refuses localhost-only admins.
func TestAdminAccess(t *testing.T) {
	tb := controlPlane(t)
	admin := kubetest.FastAdmin(t, tb)
	set := kubetest.DeployEnvoys(t, tb, admin, "a")
	targets, _ := discoverSet(t, startDiscovery(t, tb.Config, discovery.Options{Namespaces: []string{set.NS}}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("Auto", func(t *testing.T) {
		d, err := New(tb.Config, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		got := map[string]string{}
		var conns []*Conn
		for owner, tg := range targets {
			conn, err := d.Open(ctx, tg)
			if err != nil {
				t.Fatalf("Open %s: %v", owner, err)
			}
			conns = append(conns, conn)
			got[owner] = string(conn.Route) + " " + conn.Protocol
			checkSnapshot(t, conn, set, owner)
		}
		want := map[string]string{
			"plain":                     "direct ",
			"ingress":                   "port-forward websocket",
			"envoy-default-eg-1a2b3c4d": "port-forward websocket",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("routes (-want +got):\n%s", diff)
		}

		// A second Open of the same pod shares its session.
		again, err := d.Open(ctx, targets["ingress"])
		if err != nil {
			t.Fatal(err)
		}
		checkSnapshot(t, again, set, "ingress")
		if n := d.Sessions(); n != 2 {
			t.Errorf("%d port-forward sessions for 2 localhost-only pods opened 3 times, want 2", n)
		}
		d.CloseIdle()
		if n := d.Sessions(); n != 2 {
			t.Errorf("CloseIdle closed sessions in use: %d left, want 2", n)
		}
		again.Close()
		for _, c := range conns {
			c.Close()
		}
		d.CloseIdle()
		if n := d.Sessions(); n != 0 {
			t.Errorf("%d sessions left after CloseIdle with every conn closed, want 0", n)
		}
	})

	t.Run("AutoFallsBackWhenDirectFails", func(t *testing.T) {
		d, err := New(tb.Config, Options{DialTimeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		// As if a NetworkPolicy kept certdrift from the pod IP: nothing answers there.
		tg := targets["plain"]
		tg.PodIP = "127.255.255.254"
		conn, err := d.Open(ctx, tg)
		if err != nil {
			t.Fatalf("auto Open with an unreachable pod IP: %v", err)
		}
		defer conn.Close()
		if conn.Route != RoutePortForward {
			t.Errorf("route %s, want port-forward after the direct check failed", conn.Route)
		}
		checkSnapshot(t, conn, set, "plain")
	})

	t.Run("IdleSessionsClose", func(t *testing.T) {
		d, err := New(tb.Config, Options{Mode: PortForward, IdleTimeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		// Port-forward also reaches an admin on the pod IP (the pod side dials it).
		conn, err := d.Open(ctx, targets["plain"])
		if err != nil {
			t.Fatal(err)
		}
		if conn.Route != RoutePortForward {
			t.Errorf("route %s in port-forward mode", conn.Route)
		}
		checkSnapshot(t, conn, set, "plain")
		conn.Close()
		kubetest.Poll(t, "idle session closed", 5*time.Second, func() error {
			if n := d.Sessions(); n != 0 {
				return errors.New("session still open")
			}
			return nil
		})
	})

	t.Run("BoundedSessions", func(t *testing.T) {
		d, err := New(tb.Config, Options{Mode: PortForward, MaxSessions: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		first, err := d.Open(ctx, targets["ingress"])
		if err != nil {
			t.Fatal(err)
		}
		short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancelShort()
		if _, err := d.Open(short, targets["envoy-default-eg-1a2b3c4d"]); err == nil || !strings.Contains(err.Error(), "free port-forward session") {
			t.Errorf("Open beyond MaxSessions while the only session is in use: %v, want a wait that ends with the context", err)
		}
		// Released, the idle session of another pod gives way.
		done := make(chan error, 1)
		go func() {
			conn, err := d.Open(ctx, targets["envoy-default-eg-1a2b3c4d"])
			if err == nil {
				checkSnapshot(t, conn, set, "envoy-default-eg-1a2b3c4d")
				conn.Close()
			}
			done <- err
		}()
		time.Sleep(100 * time.Millisecond)
		first.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Open after the slot was released: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Open did not proceed after the slot was released")
		}
		if n := d.Sessions(); n != 1 {
			t.Errorf("%d sessions open with MaxSessions 1", n)
		}
	})

	t.Run("NothingListening", func(t *testing.T) {
		d, err := New(tb.Config, Options{Mode: PortForward})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		tg := targets["ingress"]
		conn, err := d.OpenPort(ctx, tg, 15999, true)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, conn.BaseURL+"/ready", nil)
		resp, err := conn.HTTPClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			resp.Body.Close()
			t.Fatalf("GET through a port-forward to a closed port: %d %q, want an error", resp.StatusCode, body)
		}
		if !strings.Contains(err.Error(), tg.Namespace+"/"+tg.Pod+":15999") {
			t.Errorf("error %q does not name the pod and port", err)
		}
	})

	t.Run("DirectRefusesLocalhostOnly", func(t *testing.T) {
		d, err := New(nil, Options{Mode: Direct})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		conn, err := d.Open(ctx, targets["plain"])
		if err != nil {
			t.Fatal(err)
		}
		checkSnapshot(t, conn, set, "plain")
		for _, owner := range []string{"ingress", "envoy-default-eg-1a2b3c4d"} {
			_, err := d.Open(ctx, targets[owner])
			if err == nil || !strings.Contains(err.Error(), "localhost only") || !strings.Contains(err.Error(), targets[owner].Key()) ||
				!strings.Contains(err.Error(), "pods/portforward") {
				t.Errorf("direct Open of %s: %v, want an error naming the pod, localhost and pods/portforward", owner, err)
			}
			// The audit reports it UNREACHABLE, not as a malformed answer.
			var u interface{ Unreachable() bool }
			if !errors.As(err, &u) || !u.Unreachable() {
				t.Errorf("direct Open of %s: %v is not marked unreachable", owner, err)
			}
		}
	})
}

// TestAdminAccessWithoutPortForwardRBAC runs discovery and admin access as a user who may only
// list and watch pods in one namespace: discovery works (owners inferred, the missing
// replicasets permission reported), the admin on the pod IP is reached directly, and the
// localhost-only ones fail with an error naming pods/portforward and the namespace; granting
// create on pods/portforward then makes them reachable.
func TestAdminAccessWithoutPortForwardRBAC(t *testing.T) {
	tb := controlPlane(t)
	admin := kubetest.FastAdmin(t, tb)
	set := kubetest.DeployEnvoys(t, tb, admin, "r")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	user := "pod-watcher-" + set.NS
	grant(t, admin, set.NS, user, "pods-reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}})
	cfg, err := tb.ClientConfig(user)
	if err != nil {
		t.Fatal(err)
	}

	targets, snap := discoverSet(t, startDiscovery(t, cfg, discovery.Options{Namespaces: []string{set.NS}}))
	if o := targets["plain"].Owner; o != (kube.Owner{Kind: "Deployment", Name: "plain", Inferred: true}) {
		t.Errorf("owner without replicasets get: %+v, want Deployment plain inferred", o)
	}
	var ownerErr *discovery.AccessError
	if len(snap.Errors) == 0 || !errors.As(snap.Errors[0].Err, &ownerErr) || ownerErr.Resource != "replicasets" || ownerErr.Namespace != set.NS {
		t.Errorf("snapshot errors %v, want an AccessError for replicasets in %s", snap.Errors, set.NS)
	}

	d, err := New(cfg, Options{Mode: Auto})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	conn, err := d.Open(ctx, targets["plain"])
	if err != nil {
		t.Fatalf("auto Open of the admin on the pod IP: %v", err)
	}
	checkSnapshot(t, conn, set, "plain")
	conn.Close()

	for _, owner := range []string{"ingress", "envoy-default-eg-1a2b3c4d"} {
		_, err := d.Open(ctx, targets[owner])
		var pfErr *PortForwardAccessError
		if !errors.As(err, &pfErr) || pfErr.Namespace != set.NS || pfErr.Pod != targets[owner].Pod {
			t.Fatalf("Open %s without pods/portforward: %v, want a PortForwardAccessError for %s/%s", owner, err, set.NS, targets[owner].Pod)
		}
		var u interface{ Unreachable() bool }
		if !errors.As(err, &u) || !u.Unreachable() {
			t.Errorf("Open %s without pods/portforward: %v is not marked unreachable", owner, err)
		}
		for _, s := range []string{"pods/portforward", `namespace "` + set.NS + `"`, "create"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not say %q", err, s)
			}
		}
	}
	if n := d.Sessions(); n != 0 {
		t.Errorf("%d sessions left after refused port-forwards", n)
	}

	// create alone admits SPDY (a POST); the WebSocket upgrade (a GET) is refused and the
	// dialer falls back. With get too, WebSocket is used.
	for _, step := range []struct{ verb, protocol string }{{"create", "spdy"}, {"get", "websocket"}} {
		grant(t, admin, set.NS, user, "portforward-"+step.verb, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/portforward"}, Verbs: []string{step.verb}})
		d.CloseIdle()
		kubetest.Poll(t, "port-forward allowed after granting "+step.verb, 10*time.Second, func() error {
			conn, err := d.Open(ctx, targets["ingress"])
			if err != nil {
				return err
			}
			defer conn.Close()
			if conn.Protocol != step.protocol {
				return fmt.Errorf("protocol %s, want %s", conn.Protocol, step.protocol)
			}
			checkSnapshot(t, conn, set, "ingress")
			return nil
		})
	}
}

func grant(t *testing.T, c kubernetes.Interface, ns, user, name string, rule rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: []rbacv1.PolicyRule{rule}}
	if _, err := c.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role %s: %v", name, err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role binding %s: %v", name, err)
	}
}
