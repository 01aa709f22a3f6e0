package testbed

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestIsCertdriftImage(t *testing.T) {
	cases := map[string]struct {
		image string
		want  bool
	}{
		"GHCR":              {image: "ghcr.io/certdrift/certdrift:latest", want: true},
		"Digest":            {image: "ghcr.io/certdrift/certdrift@sha256:abc", want: true},
		"Bare":              {image: "certdrift", want: true},
		"OwnerOnly":         {image: "ghcr.io/certdrift/envoy:v1.40.0"},
		"SuffixInRepo":      {image: "example.com/my-certdrift:1", want: true},
		"PrefixIsNotEnough": {image: "example.com/certdrift-docs:1"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := isCertdriftImage(c.image); got != c.want {
				t.Errorf("isCertdriftImage(%q) = %v, want %v", c.image, got, c.want)
			}
		})
	}
}

func TestCertdriftArgs(t *testing.T) {
	mounts := newMountTable([]mount{{path: "/etc/certdrift/config", host: "/node/pod/volumes/config"}})
	pn := podNet{podIP: netip.MustParseAddr("127.0.1.5"), localIP: netip.MustParseAddr("127.1.1.5")}
	cases := map[string]struct {
		command, args []string
		want          []string
		wantErr       bool
	}{
		"DefaultCommand": {want: []string{"serve"}},
		"ChartArgs": {
			args: []string{"serve", "--in-cluster", "--web.listen-address=:9809", "--web.probe-address", "0.0.0.0:9810",
				"--config=/etc/certdrift/config/config.yaml", "--namespace=static-tls", "--admin-address=localhost:9000"},
			want: []string{"serve", "--in-cluster", "--web.listen-address=127.0.1.5:9809", "--web.probe-address", "127.0.1.5:9810",
				"--config=/node/pod/volumes/config/config.yaml", "--namespace=static-tls", "--admin-address=127.1.1.5:9000"},
		},
		"OtherHostsKept": {args: []string{"audit", "--target=10.0.0.1:443", "--interval=5s"},
			want: []string{"audit", "--target=10.0.0.1:443", "--interval=5s"}},
		"CommandIsCertdrift": {command: []string{"/usr/local/bin/certdrift"}, args: []string{"version"}, want: []string{"version"}},
		"CommandIsAShell":    {command: []string{"sh", "-c"}, args: []string{"certdrift serve"}, wantErr: true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			argv, err := certdriftArgs(c.command, c.args)
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, want error %v", err, c.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(c.want, rewriteCertdriftArgs(argv, mounts, pn)); diff != "" {
				t.Errorf("arguments (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAPIServerHostPort(t *testing.T) {
	host, port, err := apiServerHostPort("https://127.0.0.1:36443")
	if err != nil || host != "127.0.0.1" || port != "36443" {
		t.Errorf("got %q %q %v, want 127.0.0.1 36443", host, port, err)
	}
	if _, _, err := apiServerHostPort("http://127.0.0.1:8080"); err == nil {
		t.Error("a plain-HTTP API server URL was accepted")
	}
}
