{{/*
certdrift.ruleGroups: the PrometheusRule's spec.groups, as YAML. The rule file
(files/certdrift.rules.yaml, a byte copy of alerts/certdrift.rules.yaml) is parsed and emitted
again with the overrides of values.yaml's prometheusRule applied, so that there is one copy of
the rules. Everything an override does not name (expr, keep_firing_for, group interval,
recording rules, fields added later) passes through as the file has it; with no overrides the
groups equal the file's (deploy/helm_test.go checks both).

An alert is addressed by name (every rule of that name) or by name/severity (the one with that
severity label in the file): the file has pairs such as CertdriftStaleServedCertificate at
warning and at critical. For each field, name/severity wins over name. A key that matches no
alert fails the render, so a typo or a renamed alert is not silently ignored.
*/}}
{{- define "certdrift.ruleGroups" -}}
{{- $pr := .Values.prometheusRule -}}
{{- $file := .Files.Get "files/certdrift.rules.yaml" | fromYaml -}}
{{- if hasKey $file "Error" -}}
{{- fail (printf "files/certdrift.rules.yaml: %s" $file.Error) -}}
{{- end -}}
{{- $overrides := $pr.alerts | default dict -}}
{{- $base := $pr.runbookBaseURL | default "" | trimSuffix "#" -}}
{{- $used := dict -}}
{{- $groups := list -}}
{{- $names := dict -}}
{{- range $g := $file.groups -}}
{{- $rules := list -}}
{{- range $rule := $g.rules -}}
{{- if not (hasKey $rule "alert") -}}
{{- /* Recording rules: extra labels would change the series they record; kept as they are. */ -}}
{{- $rules = append $rules $rule -}}
{{- else -}}
{{- $r := deepCopy $rule -}}
{{- $sev := "" -}}
{{- with $r.labels }}{{ $sev = .severity | default "" }}{{ end -}}
{{- $general := index $overrides $r.alert | default dict -}}
{{- $specific := index $overrides (printf "%s/%s" $r.alert $sev) | default dict -}}
{{- if hasKey $overrides $r.alert }}{{ $_ := set $used $r.alert true }}{{ end -}}
{{- if hasKey $overrides (printf "%s/%s" $r.alert $sev) }}{{ $_ := set $used (printf "%s/%s" $r.alert $sev) true }}{{ end -}}
{{- /* Scalars one by one: mergeOverwrite would not let a specific `disabled: false` win. */ -}}
{{- $o := dict -}}
{{- range $f := list "disabled" "severity" "for" "keepFiringFor" -}}
{{- if hasKey $specific $f }}{{ $_ := set $o $f (index $specific $f) }}{{ else if hasKey $general $f }}{{ $_ := set $o $f (index $general $f) }}{{ end -}}
{{- end -}}
{{- if not $o.disabled -}}
{{- /* Labels: the chart-wide alertLabels are added where the file has no such label; the
  alert's own override labels win over both. Annotations the same way. */ -}}
{{- $labels := merge (deepCopy ($r.labels | default dict)) (deepCopy ($pr.alertLabels | default dict)) -}}
{{- $labels = mergeOverwrite $labels (deepCopy ($general.labels | default dict)) (deepCopy ($specific.labels | default dict)) -}}
{{- with $o.severity }}{{ $_ := set $labels "severity" . }}{{ end -}}
{{- if $labels }}{{ $_ := set $r "labels" $labels }}{{ end -}}
{{- $ann := deepCopy ($r.annotations | default dict) -}}
{{- if and $base $ann.runbook_url (contains "#" $ann.runbook_url) -}}
{{- $_ := set $ann "runbook_url" (printf "%s#%s" $base (regexReplaceAll "^[^#]*#" $ann.runbook_url "")) -}}
{{- end -}}
{{- $ann = merge $ann (deepCopy ($pr.alertAnnotations | default dict)) -}}
{{- $ann = mergeOverwrite $ann (deepCopy ($general.annotations | default dict)) (deepCopy ($specific.annotations | default dict)) -}}
{{- if $ann }}{{ $_ := set $r "annotations" $ann }}{{ end -}}
{{- with $o.for }}{{ $_ := set $r "for" . }}{{ end -}}
{{- with $o.keepFiringFor }}{{ $_ := set $r "keep_firing_for" . }}{{ end -}}
{{- $rules = append $rules $r -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* A group whose alerts are all disabled goes: an empty group evaluates nothing. */ -}}
{{- if $rules -}}
{{- $_ := set $names $g.name true -}}
{{- $groups = append $groups (set (deepCopy (omit $g "rules")) "rules" $rules) -}}
{{- end -}}
{{- end -}}
{{- range $k, $_ := $overrides -}}
{{- if not (hasKey $used $k) -}}
{{- fail (printf "prometheusRule.alerts.%s matches no alert in the rule file: use an alert name (CertdriftAbsent) or name/severity (CertdriftStaleServedCertificate/warning) from alerts/certdrift.rules.yaml" $k) -}}
{{- end -}}
{{- end -}}
{{- range $g := $pr.extraGroups | default list -}}
{{- if hasKey $names $g.name -}}
{{- fail (printf "prometheusRule.extraGroups: group %q is already in the rule file or listed twice; Prometheus refuses repeated group names" $g.name) -}}
{{- end -}}
{{- $_ := set $names $g.name true -}}
{{- $groups = append $groups $g -}}
{{- end -}}
{{- toYaml $groups -}}
{{- end -}}
