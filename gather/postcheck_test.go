package main

import (
	"testing"

	"github.com/certdrift/certdrift/gather"
)

// TestPostCheckScope: a post-check observes the smallest round that holds the Envoys it names.
func TestPostCheckScope(t *testing.T) {
	for name, tc := range map[string]struct {
		envoys []string
		want   gather.Scope
	}{
		"OnePod":             {[]string{"shop/envoy-0"}, gather.OnePod("shop", "envoy-0")},
		"SameNamespace":      {[]string{"shop/envoy-1", "shop/envoy-2"}, gather.InNamespace("shop")},
		"TwoNamespaces":      {[]string{"shop/envoy-1", "edge/envoy-2"}, gather.Fleet},
		"NotANamespacedName": {[]string{"local-envoy"}, gather.Fleet},
		"Nothing":            {nil, gather.Fleet},
	} {
		if got := postCheckScope(tc.envoys); got != tc.want {
			t.Errorf("%s: postCheckScope(%q) = %+v, want %+v", name, tc.envoys, got, tc.want)
		}
	}
}
