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
{{- printf "%s/%s:%s" .Values.image.registry .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "vfps.databaseHost" -}}
{{- if .Values.database.host -}}
{{- .Values.database.host -}}
{{- else if .Values.postgres.enabled -}}
{{- printf "%s-postgresql" .Release.Name -}}
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
  value: {{ printf "Host=%s;Port=%v;Database=%s;Username=%s;%s" $host .Values.database.port .Values.database.database .Values.database.username .Values.database.additionalConnectionStringParameters | quote }}
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "vfps.passwordSecretName" . }}
      key: {{ .Values.database.existingSecretKey }}
{{- end }}
{{- end -}}
