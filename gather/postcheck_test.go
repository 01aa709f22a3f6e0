package gather

import "testing"

// TestPostCheckScope: a post-check observes the smallest round that holds the Envoys it names.
func TestPostCheckScope(t *testing.T) {
	for name, tc := range map[string]struct {
		envoys []string
		want   Scope
	}{
		"OnePod":             {[]string{"shop/envoy-0"}, OnePod("shop", "envoy-0")},
		"SameNamespace":      {[]string{"shop/envoy-1", "shop/envoy-2"}, InNamespace("shop")},
		"TwoNamespaces":      {[]string{"shop/envoy-1", "edge/envoy-2"}, Fleet},
		"NotANamespacedName": {[]string{"local-envoy"}, Fleet},
		"Nothing":            {nil, Fleet},
	} {
		if got := PostCheckScope(tc.envoys); got != tc.want {
			t.Errorf("%s: PostCheckScope(%q) = %+v, want %+v", name, tc.envoys, got, tc.want)
		}
	}
}
