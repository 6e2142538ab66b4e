{{- define "vfps.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "vfps.fullname" -}}
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

{{- define "vfps.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vfps.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The API pods, as upstream's chart selects them (so `helm upgrade` from an
upstream release keeps its immutable Deployment selector). */}}
{{- define "vfps.apiSelectorLabels" -}}
{{ include "vfps.selectorLabels" . }}
app.kubernetes.io/component: api
{{- end -}}

{{/* Container resources: `resources` when set, else upstream's `resourcesPreset`. */}}
{{- define "vfps.resources" -}}
{{- if .Values.resources -}}
{{- toYaml .Values.resources -}}
{{- else -}}
{{- $presets := dict
  "nano" (dict "requests" (dict "cpu" "100m" "memory" "128Mi") "limits" (dict "memory" "192Mi"))
  "micro" (dict "requests" (dict "cpu" "250m" "memory" "256Mi") "limits" (dict "memory" "384Mi"))
  "small" (dict "requests" (dict "cpu" "500m" "memory" "512Mi") "limits" (dict "memory" "768Mi"))
  "medium" (dict "requests" (dict "cpu" "500m" "memory" "1024Mi") "limits" (dict "memory" "1536Mi"))
  "large" (dict "requests" (dict "cpu" "1" "memory" "2048Mi") "limits" (dict "memory" "3072Mi"))
  "xlarge" (dict "requests" (dict "cpu" "1" "memory" "3072Mi") "limits" (dict "memory" "6144Mi"))
  "2xlarge" (dict "requests" (dict "cpu" "1" "memory" "3072Mi") "limits" (dict "memory" "12288Mi")) -}}
{{- $preset := default "none" .Values.resourcesPreset -}}
{{- if ne $preset "none" -}}
{{- toYaml (required (printf "resourcesPreset %q is not one of none, nano, micro, small, medium, large, xlarge, 2xlarge" $preset) (get $presets $preset)) -}}
{{- else -}}
{}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A probe as the Kubernetes API takes it: upstream's `enabled` switch removed. */}}
{{- define "vfps.probe" -}}
{{- $probe := omit (deepCopy .probe) "enabled" -}}
{{- toYaml (mergeOverwrite $probe .scheme) -}}
{{- end -}}

{{- define "vfps.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "vfps.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "vfps.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "vfps.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "vfps.image" -}}
{{- $ref := printf "%s/%s:%s" .Values.image.registry .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- if .Values.image.digest -}}
{{- $ref = printf "%s@%s" $ref .Values.image.digest -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{- define "vfps.databaseHost" -}}
{{- if .Values.database.host -}}
{{- .Values.database.host -}}
{{- end -}}
{{- end -}}

{{- define "vfps.passwordSecretName" -}}
{{- default (printf "%s-db" (include "vfps.fullname" .)) .Values.database.existingSecret -}}
{{- end -}}

{{/* The database environment shared by the app pods and the migrations Job. */}}
{{- define "vfps.databaseEnv" -}}
{{- $host := include "vfps.databaseHost" . -}}
{{- if $host }}
- name: ConnectionStrings__PostgreSQL
  value: {{ printf "Host=%s;Port=%v;Database=%s;Username=%s;%s%s" $host .Values.database.port .Values.database.database .Values.database.username (ternary (printf "Search Path=%s;" .Values.database.schema) "" (not (empty .Values.database.schema))) .Values.database.additionalConnectionStringParameters | quote }}
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "vfps.passwordSecretName" . }}
      key: {{ .Values.database.existingSecretKey }}
{{- end }}
{{- end -}}
