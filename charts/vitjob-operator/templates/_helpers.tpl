{{/*
The chart's names and labels, in the form of well-kept charts.
*/}}

{{/* The chart's name (nameOverride wins), cut to 63 characters. */}}
{{- define "vitjob-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name: fullnameOverride, else RELEASE-NAME, or RELEASE alone when it
already holds the name. Cut to 63 characters (DNS label names).
*/}}
{{- define "vitjob-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* NAME-VERSION for the helm.sh/chart label. */}}
{{- define "vitjob-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "vitjob-operator.labels" -}}
helm.sh/chart: {{ include "vitjob-operator.chart" . }}
{{ include "vitjob-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: vitjob
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* What the Deployment selects its pods by (never changes across upgrades). */}}
{{- define "vitjob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vitjob-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "vitjob-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "vitjob-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "vitjob-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
The watched namespaces, comma-separated ("" = every namespace):
watchNamespace is one name (a string, as before) or a list of names.
*/}}
{{- define "vitjob-operator.watchNamespaces" -}}
{{- $w := .Values.watchNamespace -}}
{{- if kindIs "string" $w -}}
{{- $w -}}
{{- else if $w -}}
{{- join "," $w -}}
{{- end -}}
{{- end }}
