{{/*
Names and labels shared by every template.
*/}}

{{/* The chart's name. */}}
{{- define "daemonset-canary.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The base of every object name: the release name when it contains the chart's name (so
`helm install daemonset-canary` names the objects as deploy/ does), else `<release>-<chart>`.
*/}}
{{- define "daemonset-canary.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "daemonset-canary.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Whether the chart runs the controller (rather than observe-kubevirt). */}}
{{- define "daemonset-canary.isController" -}}
{{- if eq .Values.mode "controller" -}}true{{- end -}}
{{- end -}}

{{/* The component label: what deploy/ calls the controller and the observer. */}}
{{- define "daemonset-canary.component" -}}
{{- if include "daemonset-canary.isController" . -}}controller{{- else -}}kubevirt-observer{{- end -}}
{{- end -}}

{{/*
Labels that select the pods, and the pods' own: those of deploy/, without the release. A
Deployment's selector cannot change, so with the same selector (and pod template) as deploy/,
Helm can adopt a kustomize install without replacing a pod (docs/operations.md, "From kustomize
to Helm").
*/}}
{{- define "daemonset-canary.selectorLabels" -}}
app.kubernetes.io/name: {{ include "daemonset-canary.name" . }}
app.kubernetes.io/component: {{ include "daemonset-canary.component" . }}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "daemonset-canary.labels" -}}
{{ include "daemonset-canary.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: daemonset-canary
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* The container image: repository and digest, else repository and tag (appVersion by default). */}}
{{- define "daemonset-canary.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
Cluster-scoped objects of a namespaced install carry the namespace in their name, so that one
release per namespace can coexist.
*/}}
{{- define "daemonset-canary.nodeReaderName" -}}
{{- printf "%s-node-reader-%s" (include "daemonset-canary.fullname" .) .Release.Namespace | trunc 253 -}}
{{- end -}}

{{/* The metrics Service's name, which is also the `job` label of its scrapes. */}}
{{- define "daemonset-canary.metricsServiceName" -}}
{{- printf "%s-metrics" (include "daemonset-canary.fullname" .) -}}
{{- end -}}
