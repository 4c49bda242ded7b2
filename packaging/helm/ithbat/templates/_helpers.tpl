{{/*
Names. The release name alone when it already says ithbat (release "ithbat" gives
"ithbat-agent" and "ithbat-hub", the names of the plain manifests), else RELEASE-ithbat.
*/}}
{{- define "ithbat.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ithbat.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels of one component: include "ithbat.selectorLabels" (list . "agent") */}}
{{- define "ithbat.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ $.Chart.Name }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Labels of a pod template: the selector's and part-of (no chart version: an upgrade of the
chart alone must not restart every agent). */}}
{{- define "ithbat.podLabels" -}}
{{ include "ithbat.selectorLabels" . }}
app.kubernetes.io/part-of: ithbat
{{- end -}}

{{/* Labels of an object. */}}
{{- define "ithbat.labels" -}}
{{ include "ithbat.podLabels" . }}
helm.sh/chart: {{ include "ithbat.chart" (index . 0) }}
app.kubernetes.io/managed-by: {{ (index . 0).Release.Service }}
{{- end -}}

{{- define "ithbat.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
