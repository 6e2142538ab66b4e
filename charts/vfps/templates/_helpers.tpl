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

{{/* Resources of one container: `resources` when set, else upstream's preset
(none, nano … 2xlarge), else `fallback`. Called with (dict "resources" "preset" "fallback"). */}}
{{- define "vfps.resourcesFor" -}}
{{- if .resources -}}
{{- toYaml .resources -}}
{{- else -}}
{{- $presets := dict
  "nano" (dict "requests" (dict "cpu" "100m" "memory" "128Mi") "limits" (dict "memory" "192Mi"))
  "micro" (dict "requests" (dict "cpu" "250m" "memory" "256Mi") "limits" (dict "memory" "384Mi"))
  "small" (dict "requests" (dict "cpu" "500m" "memory" "512Mi") "limits" (dict "memory" "768Mi"))
  "medium" (dict "requests" (dict "cpu" "500m" "memory" "1024Mi") "limits" (dict "memory" "1536Mi"))
  "large" (dict "requests" (dict "cpu" "1" "memory" "2048Mi") "limits" (dict "memory" "3072Mi"))
  "xlarge" (dict "requests" (dict "cpu" "1" "memory" "3072Mi") "limits" (dict "memory" "6144Mi"))
  "2xlarge" (dict "requests" (dict "cpu" "1" "memory" "3072Mi") "limits" (dict "memory" "12288Mi")) -}}
{{- $preset := default "none" .preset -}}
{{- if ne $preset "none" -}}
{{- toYaml (required (printf "resourcesPreset %q is not one of none, nano, micro, small, medium, large, xlarge, 2xlarge" $preset) (get $presets $preset)) -}}
{{- else -}}
{{- toYaml (default dict .fallback) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The vfps container's resources: `resources`, else `resourcesPreset`. */}}
{{- define "vfps.resources" -}}
{{- include "vfps.resourcesFor" (dict "resources" .Values.resources "preset" .Values.resourcesPreset) -}}
{{- end -}}

{{/* Where a pod may run and how its images are pulled: the Deployment, the
migrations Job and the test pod alike, so a private registry or tainted nodes
serve all three. */}}
{{- define "vfps.podPlacement" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* An environment list with the user's entries merged in: an entry of
`extraEnv` or `extraEnvDict` replaces the chart's entry of the same name (the
API server would otherwise keep the last and `kubectl apply` would fight over
the rest), a later user entry replaces an earlier one; each name once.
Called with (dict "chart" <YAML list> "extraEnv" <list> "extraEnvDict" <map>). */}}
{{- define "vfps.mergeEnv" -}}
{{- $user := list -}}
{{- range .extraEnv -}}
{{- $user = append $user . -}}
{{- end -}}
{{- range $k, $v := .extraEnvDict -}}
{{- $user = append $user (dict "name" $k "value" (toString $v)) -}}
{{- end -}}
{{- $byName := dict -}}
{{- $order := list -}}
{{- range $user -}}
{{- if not (hasKey $byName .name) -}}
{{- $order = append $order .name -}}
{{- end -}}
{{- $_ := set $byName .name . -}}
{{- end -}}
{{- $out := list -}}
{{- range (default "[]" .chart | fromYamlArray) -}}
{{- if not (hasKey $byName .name) -}}
{{- $out = append $out . -}}
{{- end -}}
{{- end -}}
{{- range $order -}}
{{- $out = append $out (get $byName .) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* A probe as the Kubernetes API takes it: upstream's `enabled` switch removed.
A probe given another handler (tcpSocket, exec, grpc) loses the default httpGet
that Helm's merge of the values would leave next to it (two handlers are
refused by the API); only an httpGet gets the scheme (and, under mTLS, the port). */}}
{{- define "vfps.probe" -}}
{{- $probe := omit (deepCopy .probe) "enabled" -}}
{{- if or $probe.tcpSocket $probe.exec $probe.grpc -}}
{{- $probe = omit $probe "httpGet" -}}
{{- else -}}
{{- $probe = mergeOverwrite $probe .scheme -}}
{{- end -}}
{{- toYaml $probe -}}
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

{{/* The migrations Job's service account (upstream's migrationsJob.serviceAccount.*):
its own when `create` or `name` is set, else the release's. The Job needs no API access. */}}
{{- define "vfps.migrationsServiceAccountName" -}}
{{- $sa := .Values.migrationsJob.serviceAccount -}}
{{- if $sa.create -}}
{{- default (printf "%s-migrations" (include "vfps.fullname" .) | trunc 63 | trimSuffix "-") $sa.name -}}
{{- else -}}
{{- default (include "vfps.serviceAccountName" .) $sa.name -}}
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

{{/* The Secret of the S3 credentials: `s3.existingSecret`, else the chart's
(upstream's chart's name, so an upgrade from it keeps the object). */}}
{{- define "vfps.s3SecretName" -}}
{{- default (printf "%s-s3-secret" (include "vfps.fullname" .)) .Values.s3.existingSecret -}}
{{- end -}}

{{/* The keys in that Secret: the configurable names apply to an existing
Secret only; the chart's own always holds accessKey and secretKey. */}}
{{- define "vfps.s3SecretKeys" -}}
{{- if .Values.s3.existingSecret -}}
{{- list .Values.s3.existingSecretAccessKeyKey .Values.s3.existingSecretSecretKeyKey | toJson -}}
{{- else -}}
{{- list "accessKey" "secretKey" | toJson -}}
{{- end -}}
{{- end -}}

{{/* Refuses an S3 setup the server would refuse at start-up, naming the key. */}}
{{- define "vfps.s3Checks" -}}
{{- $s3 := .Values.s3 }}
{{- if not (regexMatch "^https?://[^/]+" $s3.serviceUrl) }}
{{- fail (printf "s3.enabled needs s3.serviceUrl, the S3 endpoint as http(s)://host[:port] (it is %q)" $s3.serviceUrl) }}
{{- end }}
{{- if not $s3.bucket }}
{{- fail "s3.enabled needs s3.bucket (a bucket dedicated to vfps: its lifecycle and CORS rules are replaced at start-up)" }}
{{- end }}
{{- if $s3.webIdentity.enabled }}
{{- if or $s3.existingSecret $s3.accessKey $s3.secretKey }}
{{- fail "s3.webIdentity.enabled takes the role's credentials: drop s3.existingSecret, s3.accessKey and s3.secretKey (vfps would use the key pair, not the role)" }}
{{- end }}
{{- if not (or $s3.webIdentity.roleArn (index (default dict .Values.serviceAccount.annotations) "eks.amazonaws.com/role-arn")) }}
{{- fail "s3.webIdentity.enabled needs the role: s3.webIdentity.roleArn, or serviceAccount.annotations.\"eks.amazonaws.com/role-arn\" for EKS's pod identity webhook" }}
{{- end }}
{{- else if not (or $s3.existingSecret (and $s3.accessKey $s3.secretKey)) }}
{{- fail "s3.enabled needs the credentials: s3.existingSecret (with existingSecretAccessKeyKey and existingSecretSecretKeyKey), or s3.accessKey and s3.secretKey for a chart-made Secret, or s3.webIdentity.enabled for an IAM role" }}
{{- end }}
{{- end -}}

{{/* Where the projected web identity token of s3.webIdentity.roleArn is. */}}
{{- define "vfps.webIdentityDir" -}}
/var/run/secrets/vfps/aws
{{- end -}}

{{/* Whether the chart mounts the web identity token itself. */}}
{{- define "vfps.projectsWebIdentity" -}}
{{- if and .Values.s3.enabled .Values.s3.webIdentity.enabled .Values.s3.webIdentity.roleArn -}}true{{- end -}}
{{- end -}}

{{/* CSV jobs' settings (`S3__*`, `CsvProcessing__*`) of the vfps container;
the credentials only ever from a Secret. */}}
{{- define "vfps.jobsEnv" -}}
{{- with .Values.csvProcessing }}
- name: CsvProcessing__PseudonymizeBatchSize
  value: {{ .pseudonymizeBatchSize | int | quote }}
- name: CsvProcessing__Workers
  value: {{ .workers | int | quote }}
- name: CsvProcessing__StalledJobThreshold
  value: {{ .stalledJobThreshold | quote }}
{{- end }}
{{- if .Values.s3.enabled }}
{{- include "vfps.s3Checks" . }}
{{- $s3 := .Values.s3 }}
{{- $keys := include "vfps.s3SecretKeys" . | fromJsonArray }}
- name: S3__IsEnabled
  value: "true"
- name: S3__ServiceUrl
  value: {{ $s3.serviceUrl | quote }}
- name: S3__Bucket
  value: {{ $s3.bucket | quote }}
- name: S3__Region
  value: {{ $s3.region | quote }}
- name: S3__ForcePathStyle
  value: {{ $s3.forcePathStyle | quote }}
- name: S3__PresignedUrlExpiry
  value: {{ $s3.presignedUrlExpiry | quote }}
- name: S3__ObjectRetentionDays
  value: {{ $s3.objectRetentionDays | int | quote }}
{{- range $i, $origin := $s3.allowedOrigins }}
- name: {{ printf "S3__AllowedOrigins__%d" $i }}
  value: {{ $origin | quote }}
{{- end }}
{{- if $s3.webIdentity.enabled }}
{{- with $s3.webIdentity }}
{{- if .roleArn }}
- name: AWS_ROLE_ARN
  value: {{ .roleArn | quote }}
- name: AWS_WEB_IDENTITY_TOKEN_FILE
  value: {{ printf "%s/token" (include "vfps.webIdentityDir" $) | quote }}
{{- end }}
- name: AWS_ROLE_SESSION_NAME
  value: {{ .sessionName | quote }}
{{- with .stsEndpoint }}
- name: AWS_ENDPOINT_URL_STS
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- else }}
- name: S3__AccessKey
  valueFrom:
    secretKeyRef:
      name: {{ include "vfps.s3SecretName" . | quote }}
      key: {{ index $keys 0 | quote }}
- name: S3__SecretKey
  valueFrom:
    secretKeyRef:
      name: {{ include "vfps.s3SecretName" . | quote }}
      key: {{ index $keys 1 | quote }}
{{- with $s3.existingSecretSessionTokenKey }}
- name: S3__SessionToken
  valueFrom:
    secretKeyRef:
      name: {{ include "vfps.s3SecretName" $ | quote }}
      key: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The Secret of the UI's session key: `ui.sessionKey.existingSecret`, else
the chart's. One Secret for the whole release, so every replica seals and opens
session cookies with the same key. */}}
{{- define "vfps.uiSessionSecretName" -}}
{{- default (printf "%s-ui-session" (include "vfps.fullname" . | trunc 52 | trimSuffix "-")) .Values.ui.sessionKey.existingSecret -}}
{{- end -}}

{{/* The key in that Secret: `ui.sessionKey.key` names it in an existing
Secret; the chart's own always holds `session-key` (so a changed value cannot
make the upgrade's lookup miss and replace the key). */}}
{{- define "vfps.uiSessionSecretKey" -}}
{{- ternary .Values.ui.sessionKey.key "session-key" (not (empty .Values.ui.sessionKey.existingSecret)) -}}
{{- end -}}

{{/* The admin UI's settings (`VFPS_UI_*`) of the vfps container; the session
key only ever from a Secret. */}}
{{- define "vfps.uiEnv" }}
- name: VFPS_UI_SESSION_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "vfps.uiSessionSecretName" . | quote }}
      key: {{ include "vfps.uiSessionSecretKey" . | quote }}
- name: VFPS_UI_SESSION_LIFETIME
  value: {{ .Values.ui.sessionLifetime | quote }}
{{- with .Values.ui.publicUrl }}
- name: VFPS_UI_PUBLIC_URL
  value: {{ . | quote }}
{{- end }}
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

{{/* The StatefulSet names upstream's bundled PostgreSQL had in this release:
`<release>-postgres` (CloudPirates subchart, with postgres.nameOverride) and
`<release>-postgresql` (the Bitnami subchart of upstream's older versions). */}}
{{- define "vfps.upstreamPostgresNames" -}}
{{- list (printf "%s-%s" .Release.Name (default "postgres" .Values.postgres.nameOverride) | trunc 63 | trimSuffix "-") (printf "%s-postgresql" .Release.Name | trunc 63 | trimSuffix "-") | toJson -}}
{{- end -}}

{{/* The embedded SQLite file's PersistentVolumeClaim ("" when the data lives in an emptyDir). */}}
{{- define "vfps.dataClaim" -}}
{{- if and (not .Values.database.host) .Values.persistence.enabled -}}
{{- default (printf "%s-data" (include "vfps.fullname" .)) .Values.persistence.existingClaim -}}
{{- end -}}
{{- end -}}

{{/* The chart's environment of the vfps container (extraEnv and extraEnvDict
are merged in by vfps.mergeEnv). */}}
{{- define "vfps.appEnv" -}}
{{- include "vfps.databaseEnv" . }}
{{- if .Values.keys.existingSecret }}
- name: VFPS_KEYS
  value: "file:/etc/vfps/keys/keys"
{{- end }}
- name: VFPS_SHUTDOWN_TIMEOUT
  value: {{ printf "%ds" (int .Values.gracefulShutdown.shutdownTimeoutSeconds) | quote }}
- name: Pseudonymization__Caching__Namespaces__IsEnabled
  value: {{ .Values.caching.namespaces | quote }}
- name: Pseudonymization__Caching__Pseudonyms__IsEnabled
  value: {{ .Values.caching.pseudonyms | quote }}
- name: Pseudonymization__Caching__SizeLimit
  value: {{ .Values.caching.sizeLimit | int | quote }}
- name: Pseudonymization__Caching__AbsoluteExpiration
  value: {{ .Values.caching.absoluteExpiration | quote }}
- name: VFPS_LOG_JSON
  value: "true"
{{- include "vfps.jobsEnv" . }}
{{- if .Values.tracing.enabled }}
- name: Tracing__IsEnabled
  value: "true"
- name: Tracing__ServiceName
  value: {{ .Values.tracing.serviceName | quote }}
- name: Tracing__RootSampler
  value: {{ .Values.tracing.rootSampler | quote }}
- name: Tracing__SamplingProbability
  value: {{ .Values.tracing.samplingProbability | quote }}
{{- with .Values.tracing.otlp.endpoint }}
- name: Tracing__Otlp__Endpoint
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- if .Values.appsettings }}
- name: VFPS_APPSETTINGS_FILE
  value: /etc/vfps/appsettings/appsettings.json
{{- end }}
- name: VFPS_GRPC_REFLECTION
  value: {{ .Values.grpc.reflection | quote }}
{{- with .Values.authorization }}
- name: Authorization__IsEnabled
  value: {{ .enabled | quote }}
{{- if .authority }}
- name: Authorization__Authority
  value: {{ .authority | quote }}
{{- end }}
{{- if .audience }}
- name: Authorization__Audience
  value: {{ .audience | quote }}
{{- end }}
- name: Authorization__RoleClaimType
  value: {{ .roleClaimType | quote }}
- name: Authorization__RequireHttpsMetadata
  value: {{ .requireHttpsMetadata | quote }}
- name: VFPS_TOKEN_CACHE_DURATION
  value: {{ .tokenCacheDuration | quote }}
{{- range $i, $role := .adminRoles }}
- name: {{ printf "Authorization__AdminRoles__%d" $i }}
  value: {{ $role | quote }}
{{- end }}
{{- range $i, $rule := .namespaceRules }}
- name: {{ printf "Authorization__NamespaceRules__%d__Namespace" $i }}
  value: {{ required "authorization.namespaceRules[].namespace is required" $rule.namespace | quote }}
{{- range $field := list "readRoles" "writeRoles" "reverseLookupRoles" }}
{{- range $j, $role := (index $rule $field | default list) }}
- name: {{ printf "Authorization__NamespaceRules__%d__%s__%d" $i (title $field) $j }}
  value: {{ $role | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- if .clientId }}
- name: Authorization__ClientId
  value: {{ .clientId | quote }}
{{- end }}
- name: Authorization__UsePushedAuthorizationRequests
  value: {{ .usePushedAuthorizationRequests | quote }}
{{- if .clientSecret.existingSecret }}
- name: Authorization__ClientSecret
  valueFrom:
    secretKeyRef:
      name: {{ .clientSecret.existingSecret | quote }}
      key: {{ .clientSecret.key | quote }}
{{- end }}
{{- end }}
{{- include "vfps.uiEnv" . }}
{{- if .Values.tls.enabled }}
- name: VFPS_TLS_CERT_FILE
  value: /etc/vfps/tls/tls.crt
- name: VFPS_TLS_KEY_FILE
  value: /etc/vfps/tls/tls.key
- name: VFPS_TLS_RELOAD_INTERVAL
  value: {{ .Values.tls.reloadInterval | quote }}
{{- if .Values.tls.clientCaKey }}
- name: VFPS_TLS_CLIENT_CA_FILE
  value: {{ printf "/etc/vfps/tls/%s" .Values.tls.clientCaKey | quote }}
{{- end }}
{{- end }}
{{- range $i, $ns := .Values.initNamespaces }}
{{- range $k, $v := $ns }}
- name: {{ printf "Init__v1__Namespaces__%d__%s" $i (title $k) }}
  value: {{ $v | quote }}
{{- end }}
{{- end }}
{{- end -}}
