{{/*
certdrift.memoryBytes: a Kubernetes memory quantity (256Mi, 1.5Gi, 300M, 129e6, 268435456) as a
number of bytes. Only what a memory limit is written as; anything else fails with the value.
*/}}
{{- define "certdrift.memoryBytes" -}}
{{- if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) -}}
{{- printf "%d" (int64 .) -}}
{{- else -}}
{{- $q := toString . -}}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?([eE][0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$" $q) -}}
{{- fail (printf "resources.limits.memory %q: not a memory quantity the chart can turn into GOMEMLIMIT; set goMemLimitRatio: 0 and GOMEMLIMIT in env" $q) -}}
{{- end -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $suffix := trimPrefix $num $q -}}
{{- $units := dict "" 1.0 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- $mult := 1.0 -}}
{{- if hasKey $units $suffix -}}
{{- $mult = index $units $suffix -}}
{{- else -}}
{{- range until (int (substr 1 -1 $suffix)) }}{{ $mult = mulf $mult 10 }}{{ end -}}
{{- end -}}
{{- printf "%d" (int64 (floor (mulf (float64 $num) $mult))) -}}
{{- end -}}
{{- end -}}

{{/*
certdrift.env: the container's environment. POD_NAMESPACE/POD_NAME: serve --remediate elects its
leader on a Lease in its own namespace, named after the pod. GOMEMLIMIT: goMemLimitRatio of the
memory limit, as a plain byte count (what runtime/debug.SetMemoryLimit's parser reads with no
suffix), unless the user sets GOMEMLIMIT.
*/}}
{{- define "certdrift.env" -}}
{{- $env := list
  (dict "name" "POD_NAMESPACE" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.namespace")))
  (dict "name" "POD_NAME" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.name"))) -}}
{{- $user := list -}}
{{- range $k := keys (.Values.env | default dict) | sortAlpha -}}
{{- $user = append $user (dict "name" $k "value" (toString (index $.Values.env $k))) -}}
{{- end -}}
{{- $user = concat $user (.Values.extraEnv | default list) -}}
{{- $userNames := dict -}}
{{- range $user }}{{ $_ := set $userNames .name true }}{{ end -}}
{{- $limit := dig "limits" "memory" "" (.Values.resources | default dict) -}}
{{- if and .Values.goMemLimitRatio $limit (not (hasKey $userNames "GOMEMLIMIT")) -}}
{{- $bytes := include "certdrift.memoryBytes" $limit | float64 -}}
{{- $env = append $env (dict "name" "GOMEMLIMIT" "value" (printf "%d" (int64 (floor (mulf $bytes .Values.goMemLimitRatio))))) -}}
{{- end -}}
{{- $seen := dict -}}
{{- range concat $env $user -}}
{{- if hasKey $seen .name -}}
{{- fail (printf "env/extraEnv: %s is set twice (the chart sets POD_NAMESPACE and POD_NAME itself)" .name) -}}
{{- end -}}
{{- $_ := set $seen .name true -}}
{{- end -}}
{{- toYaml (concat $env $user) -}}
{{- end -}}

{{/*
Security contexts: the hardened defaults (restricted Pod Security level) with the user's keys
replacing the default's key by key (a key set to false or 0 really replaces it, which a deep
merge would skip).
*/}}
{{- define "certdrift.podSecurityContext" -}}
{{- $sc := dict "runAsNonRoot" true "runAsUser" 65532 "runAsGroup" 65532 "fsGroup" 65532 "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- range $k, $v := .Values.podSecurityContext | default dict }}{{ $_ := set $sc $k $v }}{{ end -}}
{{- toYaml $sc -}}
{{- end -}}

{{- define "certdrift.containerSecurityContext" -}}
{{- $sc := dict "allowPrivilegeEscalation" false "readOnlyRootFilesystem" true "runAsNonRoot" true "capabilities" (dict "drop" (list "ALL")) -}}
{{- range $k, $v := .Values.containerSecurityContext | default dict }}{{ $_ := set $sc $k $v }}{{ end -}}
{{- toYaml $sc -}}
{{- end -}}

{{/* Topology spread constraints; one without a labelSelector selects the release's pods. */}}
{{- define "certdrift.topologySpreadConstraints" -}}
{{- $sel := include "certdrift.selectorLabels" . | fromYaml -}}
{{- $out := list -}}
{{- range .Values.topologySpreadConstraints -}}
{{- $c := deepCopy . -}}
{{- if not (hasKey $c "labelSelector") }}{{ $_ := set $c "labelSelector" (dict "matchLabels" $sel) }}{{ end -}}
{{- $out = append $out $c -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* The helm test pod's target: the Service unless tests.address says otherwise. */}}
{{- define "certdrift.testAddress" -}}
{{- .Values.tests.address | default (printf "%s.%s.svc:%v" (include "certdrift.fullname" .) .Release.Namespace .Values.service.port) -}}
{{- end -}}

{{/* Labels of the helm test pod: the release's, with component "test" so no selector of the
exporter's pods matches it. */}}
{{- define "certdrift.testSelectorLabels" -}}
app.kubernetes.io/name: {{ include "certdrift.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: test
{{- end -}}
