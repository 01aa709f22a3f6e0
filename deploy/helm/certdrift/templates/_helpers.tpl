{{/* Chart name, truncated to the 63 characters a label value may hold. */}}
{{- define "certdrift.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Full name of the release's objects. A release named like the chart ("certdrift") gets plain
"certdrift" names, the same as the kustomize base, so the two install methods are comparable.
*/}}
{{- define "certdrift.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "certdrift.selectorLabels" -}}
app.kubernetes.io/name: {{ include "certdrift.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: exporter
{{- end -}}

{{- define "certdrift.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "certdrift.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: certdrift
{{- end -}}

{{- define "certdrift.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "certdrift.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "certdrift.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag -}}
{{- end -}}

{{/* image.pullPolicy, else Kubernetes' own default spelled out: Always for the tag "latest"
     without a digest (a moving tag), IfNotPresent for a release tag or a digest. */}}
{{- define "certdrift.imagePullPolicy" -}}
{{- if .Values.image.pullPolicy -}}
{{- .Values.image.pullPolicy -}}
{{- else if and (eq (include "certdrift.imageTag" .) "latest") (not .Values.image.digest) -}}
Always
{{- else -}}
IfNotPresent
{{- end -}}
{{- end -}}

{{- define "certdrift.image" -}}
{{- $tag := include "certdrift.imageTag" . -}}
{{- if .Values.image.digest -}}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* The namespaces the namespaced profile audits; fails early on an empty list. */}}
{{- define "certdrift.namespaces" -}}
{{- if eq .Values.rbac.profile "namespaced" -}}
{{- if not .Values.rbac.namespaces -}}
{{- fail "rbac.profile=namespaced needs at least one namespace in rbac.namespaces" -}}
{{- end -}}
{{- join "," .Values.rbac.namespaces -}}
{{- end -}}
{{- end -}}

{{/*
Read-only rules, identical to deploy/kustomize/base/rbac-readonly.yaml (deploy/helm_test.go
compares them, and docs/operate.md's RBAC table against them):
- secrets, configmaps: the desired certificates and CA bundles;
- pods: the Envoys, their volumes and owners;
- replicasets get: to name a pod's Deployment (pod -> ReplicaSet -> Deployment);
- cert-manager.io certificates, certificaterequests (rbac.certManager): cert-manager's account of
  each Secret it issues.
Nothing here can change anything or reach into a pod.
*/}}
{{- define "certdrift.readonlyRules" -}}
- apiGroups: [""]
  resources: [secrets, configmaps, pods]
  verbs: [get, list, watch]
- apiGroups: [apps]
  resources: [replicasets]
  verbs: [get]
{{- if .Values.rbac.certManager }}
- apiGroups: [cert-manager.io]
  resources: [certificates, certificaterequests]
  verbs: [get, list, watch]
{{- end }}
{{- end -}}

{{/*
Port-forward (rbac.portForward), identical to deploy/kustomize/components/port-forward: to reach
an Envoy admin bound to the pod's localhost. This is write access: a port-forward reaches every
port of every pod where it is granted, an Envoy admin's POST /quitquitquit included.
*/}}
{{- define "certdrift.portforwardRules" -}}
- apiGroups: [""]
  resources: [pods/portforward]
  verbs: [create]
{{- end -}}

{{/*
Repair rules, identical to deploy/kustomize/overlays/repair/rbac-repair.yaml: evict through the
Eviction API (PodDisruptionBudgets are honoured), or patch the owner's pod template
(rollout-restart; the ValidatingAdmissionPolicy in repair-policy.yaml refuses any other change),
and record an Event per action. Nothing here can create or delete pods.
*/}}
{{- define "certdrift.repairRules" -}}
- apiGroups: [""]
  resources: [pods/eviction]
  verbs: [create]
- apiGroups: [apps]
  resources: [deployments, daemonsets, statefulsets]
  verbs: [get, patch]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}

{{/*
Leases, only in certdrift's own namespace: the election Lease of serve --remediate and every
workload's reload record (cooldown, last outcome; remediate/state.go).
*/}}
{{- define "certdrift.leasesRules" -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
{{- end -}}

{{/*
Where each grant applies, as JSON: {"cluster": true} or {"namespaces": [...]}. The template
guards here fail the render on contradictory values instead of granting more than asked.
*/}}
{{- define "certdrift.portForwardScope" -}}
{{- $pf := .Values.rbac.portForward -}}
{{- $namespaced := eq .Values.rbac.profile "namespaced" -}}
{{- if not $pf.enabled -}}
{{- if or $pf.namespaces $pf.clusterWide -}}
{{- fail "rbac.portForward.namespaces/clusterWide are set but rbac.portForward.enabled is false" -}}
{{- end -}}
{{- dict | toJson -}}
{{- else if $pf.clusterWide -}}
{{- if or $namespaced $pf.namespaces -}}
{{- fail "rbac.portForward.clusterWide grants port-forward in every namespace: not with the namespaced profile, nor with rbac.portForward.namespaces" -}}
{{- end -}}
{{- dict "cluster" true | toJson -}}
{{- else if $pf.namespaces -}}
{{- if $namespaced -}}
{{- range $pf.namespaces -}}
{{- if not (has . $.Values.rbac.namespaces) -}}
{{- fail (printf "rbac.portForward.namespaces: %s is not in rbac.namespaces" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- dict "namespaces" $pf.namespaces | toJson -}}
{{- else if $namespaced -}}
{{- dict "namespaces" .Values.rbac.namespaces | toJson -}}
{{- else -}}
{{- fail "rbac.portForward.enabled with the cluster-readonly profile needs rbac.portForward.namespaces (where Envoy admins listen on localhost only), or rbac.portForward.clusterWide=true: port-forward is write access to every pod where it is granted" -}}
{{- end -}}
{{- end -}}

{{- define "certdrift.repairScope" -}}
{{- $r := .Values.repair -}}
{{- $namespaced := eq .Values.rbac.profile "namespaced" -}}
{{- if not $r.enabled -}}
{{- if $r.namespaces -}}
{{- fail "repair.namespaces is set but repair.enabled is false" -}}
{{- end -}}
{{- dict | toJson -}}
{{- else if $r.namespaces -}}
{{- if $namespaced -}}
{{- range $r.namespaces -}}
{{- if not (has . $.Values.rbac.namespaces) -}}
{{- fail (printf "repair.namespaces: %s is not in rbac.namespaces (certdrift does not audit it)" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- dict "namespaces" $r.namespaces | toJson -}}
{{- else if $namespaced -}}
{{- dict "namespaces" .Values.rbac.namespaces | toJson -}}
{{- else -}}
{{- dict "cluster" true | toJson -}}
{{- end -}}
{{- end -}}

{{/*
One grant: the rules of "certdrift.<name>Rules" as a ClusterRole and ClusterRoleBinding when
scope.cluster, else as a Role and RoleBinding in each of scope.namespaces.
*/}}
{{- define "certdrift.grant" -}}
{{- $root := .root -}}
{{- $name := printf "%s-%s" (include "certdrift.fullname" $root) .name -}}
{{- $rules := include (printf "certdrift.%sRules" .name) $root -}}
{{- if .scope.cluster }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $name }}
  labels:
    {{- include "certdrift.labels" $root | nindent 4 }}
rules:
  {{- $rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "certdrift.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}
subjects:
  {{- include "certdrift.subjects" $root | nindent 2 }}
{{- end }}
{{- range .scope.namespaces }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}
  namespace: {{ . }}
  labels:
    {{- include "certdrift.labels" $root | nindent 4 }}
rules:
  {{- $rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}
  namespace: {{ . }}
  labels:
    {{- include "certdrift.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}
subjects:
  {{- include "certdrift.subjects" $root | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "certdrift.subjects" -}}
- kind: ServiceAccount
  name: {{ include "certdrift.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}

{{/* Name of the web-config Secret, created or existing. */}}
{{- define "certdrift.webConfigSecret" -}}
{{- default (printf "%s-web-config" (include "certdrift.fullname" .)) .Values.webConfig.existingSecret -}}
{{- end -}}

{{/* Endpoint fields shared by the ServiceMonitor and the PodMonitor. */}}
{{- define "certdrift.oneMonitor" -}}
{{- if and .Values.serviceMonitor.enabled .Values.podMonitor.enabled -}}
{{- fail "serviceMonitor.enabled and podMonitor.enabled are both true: Prometheus would scrape every certdrift series twice (once per monitor); enable one" -}}
{{- end -}}
{{- end -}}


{{- define "certdrift.monitorEndpoint" -}}
port: http-metrics
path: /metrics
scheme: {{ .scheme | default "http" }}
honorLabels: {{ .honorLabels }}
{{- with .interval }}
interval: {{ . }}
{{- end }}
{{- with .scrapeTimeout }}
scrapeTimeout: {{ . }}
{{- end }}
{{- with .tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if and .basicAuth .authorization }}
{{- fail "serviceMonitor/podMonitor: set basicAuth or authorization, not both (Prometheus accepts one way of authenticating a scrape)" }}
{{- end }}
{{- with .basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .authorization }}
authorization:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .relabelings }}
relabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
The restart-only policy's variables and validations (repair-policy.yaml). CEL cannot iterate the
fields of a typed object, but dyn() makes the checker treat it as a map, and at run time the API
server's object values are maps of their set fields: so every field is compared, fields added by
later API versions too, except the one the restart sets. metadata is compared by field (labels,
annotations, owners, finalizers) because the server itself moves generation, resourceVersion and
managedFields on every write.
*/}}
{{- define "certdrift.restartOnlyPolicy" -}}
variables:
  - name: restartedAt
    expression: '"kubectl.kubernetes.io/restartedAt"'
  - name: spec
    expression: dyn(object.spec)
  - name: oldSpec
    expression: dyn(oldObject.spec)
  - name: template
    expression: dyn(object.spec.template)
  - name: oldTemplate
    expression: dyn(oldObject.spec.template)
  - name: templateMeta
    expression: variables.template.?metadata.orValue({})
  - name: oldTemplateMeta
    expression: variables.oldTemplate.?metadata.orValue({})
  - name: annotations
    expression: variables.templateMeta.?annotations.orValue({})
  - name: oldAnnotations
    expression: variables.oldTemplateMeta.?annotations.orValue({})
validations:
  - expression: >-
      variables.spec.all(k, k == "template" || (k in variables.oldSpec && variables.spec[k] == variables.oldSpec[k])) &&
      variables.oldSpec.all(k, k in variables.spec)
    messageExpression: >-
      "certdrift may only restart " + request.kind.kind + " " + object.metadata.name +
      " (pod template annotation kubectl.kubernetes.io/restartedAt): its spec (replicas, selector, strategy, ...) must not change"
    reason: Forbidden
  - expression: >-
      variables.template.all(k, k == "metadata" || (k in variables.oldTemplate && variables.template[k] == variables.oldTemplate[k])) &&
      variables.oldTemplate.all(k, k in variables.template)
    messageExpression: >-
      "certdrift may only restart " + request.kind.kind + " " + object.metadata.name +
      " (pod template annotation kubectl.kubernetes.io/restartedAt): its pod spec (containers, images, volumes, ...) must not change"
    reason: Forbidden
  - expression: >-
      variables.templateMeta.all(k, k == "annotations" || (k in variables.oldTemplateMeta && variables.templateMeta[k] == variables.oldTemplateMeta[k])) &&
      variables.oldTemplateMeta.all(k, k == "annotations" || k in variables.templateMeta)
    messageExpression: >-
      "certdrift may only restart " + request.kind.kind + " " + object.metadata.name +
      " (pod template annotation kubectl.kubernetes.io/restartedAt): its pod template labels must not change"
    reason: Forbidden
  - expression: >-
      variables.annotations.all(k, k == variables.restartedAt || (k in variables.oldAnnotations && variables.annotations[k] == variables.oldAnnotations[k])) &&
      variables.oldAnnotations.all(k, k in variables.annotations)
    messageExpression: >-
      "certdrift may only restart " + request.kind.kind + " " + object.metadata.name +
      ": of its pod template annotations only kubectl.kubernetes.io/restartedAt may be set or changed"
    reason: Forbidden
  - expression: >-
      object.metadata.?labels == oldObject.metadata.?labels &&
      object.metadata.?annotations == oldObject.metadata.?annotations &&
      object.metadata.?ownerReferences == oldObject.metadata.?ownerReferences &&
      object.metadata.?finalizers == oldObject.metadata.?finalizers
    messageExpression: >-
      "certdrift may only restart " + request.kind.kind + " " + object.metadata.name +
      " (pod template annotation kubectl.kubernetes.io/restartedAt): its labels, annotations, owners and finalizers must not change"
    reason: Forbidden
{{- end -}}
