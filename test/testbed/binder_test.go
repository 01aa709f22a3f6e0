package testbed

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodFitsNode(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "testbed-node-2", Labels: map[string]string{"kubernetes.io/os": "linux", "zone": "a"}}}
	term := func(exprs []corev1.NodeSelectorRequirement, fields []corev1.NodeSelectorRequirement) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: exprs, MatchFields: fields}},
		}}}
	}
	cases := map[string]struct {
		reason string
		spec   corev1.PodSpec
		want   bool
	}{
		"NoConstraints":    {reason: "a plain pod fits anywhere", want: true},
		"SelectorMatch":    {reason: "nodeSelector on a label the node has", spec: corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/os": "linux"}}, want: true},
		"SelectorMismatch": {reason: "nodeSelector on another value", spec: corev1.PodSpec{NodeSelector: map[string]string{"zone": "b"}}},
		"DaemonSetField": {reason: "the DaemonSet controller pins pods with matchFields metadata.name",
			spec: corev1.PodSpec{Affinity: term(nil, []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"testbed-node-2"}}})}, want: true},
		"DaemonSetOtherNode": {reason: "a DaemonSet pod for another node",
			spec: corev1.PodSpec{Affinity: term(nil, []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"testbed-node-1"}}})}},
		"NotIn": {reason: "NotIn on the node's value excludes it",
			spec: corev1.PodSpec{Affinity: term([]corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"a"}}}, nil)}},
		"DoesNotExist": {reason: "DoesNotExist on an absent label",
			spec: corev1.PodSpec{Affinity: term([]corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpDoesNotExist}}, nil)}, want: true},
		"EmptyTerm": {reason: "an empty term matches nothing",
			spec: corev1.PodSpec{Affinity: term(nil, nil)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: tc.spec}
			if got := podFitsNode(pod, node); got != tc.want {
				t.Errorf("%s: podFitsNode = %v, want %v", tc.reason, got, tc.want)
			}
		})
	}
}
