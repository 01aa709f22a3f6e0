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

{{- define "certdrift.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
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
compares them):
- secrets, configmaps: the desired certificates and CA bundles;
- pods: the Envoys, their volumes and owners;
- replicasets get: to name a pod's Deployment (pod -> ReplicaSet -> Deployment);
- pods/portforward create: to reach an Envoy admin bound to localhost (--admin-access
  port-forward or auto), the one non-read verb.
*/}}
{{- define "certdrift.readonlyRules" -}}
- apiGroups: [""]
  resources: [secrets, configmaps, pods]
  verbs: [get, list, watch]
- apiGroups: [apps]
  resources: [replicasets]
  verbs: [get]
- apiGroups: [""]
  resources: [pods/portforward]
  verbs: [create]
{{- end -}}

{{/*
Repair rules, identical to deploy/kustomize/overlays/repair/rbac-repair.yaml: evict through the
Eviction API (PodDisruptionBudgets are honoured), or patch the owner's pod template
(rollout-restart), and record an Event per action. Nothing here can create or delete pods.
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
# The reload cooldown of each workload is a Lease in the workload's namespace (remediate).
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
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
