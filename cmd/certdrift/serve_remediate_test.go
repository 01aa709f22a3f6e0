package main

import (
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/remediate"
)

func TestRemediateFlagsValidate(t *testing.T) {
	ok := func() remediateFlags {
		return remediateFlags{Remediate: true, RemediateLeaseName: "certdrift-remediate", RemediateLeaseDuration: 15 * time.Second,
			Repair: remediate.Policy{LeaseNamespace: "certdrift", Budget: 1, Cooldown: time.Minute, Timeout: time.Minute}}
	}
	cases := map[string]struct {
		reason  string
		flags   func() remediateFlags
		kube    bool
		shards  int
		podNS   string
		wantErr string
		wantNS  string
	}{
		"Off":         {reason: "nothing to check when off", flags: func() remediateFlags { return remediateFlags{} }, shards: 1},
		"DryRunAlone": {reason: "--remediate-dry-run means nothing alone", flags: func() remediateFlags { return remediateFlags{RemediateDryRun: true} }, shards: 1, wantErr: "--remediate-dry-run needs --remediate"},
		"Valid":       {reason: "a complete configuration", flags: ok, kube: true, shards: 1, wantNS: "certdrift"},
		"LocalMode":   {reason: "repair in the exporter is Kubernetes only", flags: ok, shards: 1, wantErr: "needs Kubernetes mode"},
		"Sharded":     {reason: "a shard sees part of the fleet", flags: ok, kube: true, shards: 2, wantErr: "--total-shards"},
		"NamespaceFromPod": {reason: "POD_NAMESPACE fills in the lease namespace", kube: true, shards: 1, podNS: "from-pod", wantNS: "from-pod",
			flags: func() remediateFlags { f := ok(); f.Repair.LeaseNamespace = ""; return f }},
		"NoNamespace": {reason: "the Lease needs a namespace", kube: true, shards: 1, wantErr: "--reload-lease-namespace",
			flags: func() remediateFlags { f := ok(); f.Repair.LeaseNamespace = ""; return f }},
		"ShortLease": {reason: "a lease shorter than 2s cannot be renewed reliably", kube: true, shards: 1, wantErr: "--remediate-lease-duration",
			flags: func() remediateFlags { f := ok(); f.RemediateLeaseDuration = time.Second; return f }},
		"ZeroTimeout": {reason: "an action needs a deadline", kube: true, shards: 1, wantErr: "--reload-timeout",
			flags: func() remediateFlags { f := ok(); f.Repair.Timeout = 0; return f }},
		"BadLeaseNamespace": {reason: "a namespace is a DNS label (serve did not check before)", kube: true, shards: 1, wantErr: "not a namespace name",
			flags: func() remediateFlags { f := ok(); f.Repair.LeaseNamespace = "a.b"; return f }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", tc.podNS)
			f := tc.flags()
			err := f.validate(tc.kube, tc.shards)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("%s: unexpected error %v", tc.reason, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("%s: error %v, want one naming %q", tc.reason, err, tc.wantErr)
			}
			if tc.wantNS != "" && f.Repair.LeaseNamespace != tc.wantNS {
				t.Errorf("%s: lease namespace %q, want %q", tc.reason, f.Repair.LeaseNamespace, tc.wantNS)
			}
		})
	}
}
