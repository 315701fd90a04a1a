{{/* The release's base name, within Kubernetes' 63 characters. */}}
{{- define "idemflow.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* A component's name: <fullname>-<component>. */}}
{{- define "idemflow.name" -}}
{{- printf "%s-%s" (include "idemflow.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "idemflow.selectorLabels" -}}
app.kubernetes.io/name: idemflow
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "idemflow.labels" -}}
{{ include "idemflow.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "idemflow.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The chart's own Secret: the values given in place of existing Secrets. */}}
{{- define "idemflow.secretName" -}}
{{- include "idemflow.fullname" . -}}
{{- end -}}

{{/* Whether the chart keeps anything in its own Secret. */}}
{{- define "idemflow.ownSecret" -}}
{{- $v := .Values -}}
{{- if or (and (not $v.database.existingSecret) $v.database.url) (and (not $v.temporal.apiKey.existingSecret) $v.temporal.apiKey.value) (and (not $v.agents.existingSecret) $v.agents.bootstrapTokens) (and (not $v.temporal.tls.existingSecret) $v.temporal.tls.cert) -}}
true
{{- end -}}
{{- end -}}

{{/* A variable read from a Secret's key: .name, .secret, .key. */}}
{{- define "idemflow.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .key }}
{{- end -}}

{{/*
The environment every idemflow process reads: PostgreSQL, Temporal, the
settings. Secrets come by reference, never as values in the pod spec.
*/}}
{{- define "idemflow.env" -}}
{{- $v := .Values -}}
{{- $own := include "idemflow.secretName" . -}}
{{- if not (or $v.database.existingSecret $v.database.url) -}}
{{- fail "database.url or database.existingSecret is required: idemflow keeps its records in PostgreSQL" -}}
{{- end -}}
{{- if not $v.temporal.address -}}
{{- fail "temporal.address is required: host:port of Temporal's frontend (Temporal Cloud's, or your Temporal chart's frontend Service)" -}}
{{- end }}
{{ include "idemflow.secretEnv" (dict "name" "DATABASE_URL" "secret" ($v.database.existingSecret | default $own) "key" (ternary $v.database.secretKey "DATABASE_URL" (not (empty $v.database.existingSecret)))) }}
{{- if and $v.database.existingSecret $v.database.listenSecretKey }}
{{ include "idemflow.secretEnv" (dict "name" "IDEMFLOW_LISTEN_DATABASE_URL" "secret" $v.database.existingSecret "key" $v.database.listenSecretKey) }}
{{- else if and (not $v.database.existingSecret) $v.database.listenUrl }}
{{ include "idemflow.secretEnv" (dict "name" "IDEMFLOW_LISTEN_DATABASE_URL" "secret" $own "key" "IDEMFLOW_LISTEN_DATABASE_URL") }}
{{- end }}
- name: TEMPORAL_ADDRESS
  value: {{ $v.temporal.address | quote }}
- name: TEMPORAL_NAMESPACE
  value: {{ $v.temporal.namespace | quote }}
{{- if $v.temporal.apiKey.existingSecret }}
{{ include "idemflow.secretEnv" (dict "name" "TEMPORAL_API_KEY" "secret" $v.temporal.apiKey.existingSecret "key" $v.temporal.apiKey.secretKey) }}
{{- else if $v.temporal.apiKey.value }}
{{ include "idemflow.secretEnv" (dict "name" "TEMPORAL_API_KEY" "secret" $own "key" "TEMPORAL_API_KEY") }}
{{- end }}
{{- if $v.temporal.tls.enabled }}
- name: TEMPORAL_TLS
  value: "true"
{{- if or $v.temporal.tls.existingSecret $v.temporal.tls.cert }}
- name: TEMPORAL_TLS_CERT
  value: /etc/idemflow/temporal-tls/tls.crt
- name: TEMPORAL_TLS_KEY
  value: /etc/idemflow/temporal-tls/tls.key
{{- end }}
{{- if or (and $v.temporal.tls.existingSecret $v.temporal.tls.caKey) $v.temporal.tls.ca }}
- name: TEMPORAL_TLS_CA
  value: /etc/idemflow/temporal-tls/ca.crt
{{- end }}
{{- if $v.temporal.tls.serverName }}
- name: TEMPORAL_TLS_SERVER_NAME
  value: {{ $v.temporal.tls.serverName | quote }}
{{- end }}
{{- end }}
- name: IDEMFLOW_RECORD_RETENTION
  value: {{ $v.settings.recordRetention | quote }}
- name: IDEMFLOW_LOG_LEVEL
  value: {{ $v.settings.logLevel | quote }}
{{- if $v.settings.tools }}
- name: IDEMFLOW_TOOLS
  value: /etc/idemflow/tools/tools.yaml
{{- end }}
{{- end -}}

{{/* The worker's settings: the reconcile-and-purge Schedule it applies. */}}
{{- define "idemflow.workerEnv" -}}
- name: IDEMFLOW_RECONCILE_INTERVAL
  value: {{ .Values.settings.reconcileInterval | quote }}
- name: IDEMFLOW_PROCESSING_TIMEOUT
  value: {{ .Values.settings.processingTimeout | quote }}
- name: IDEMFLOW_MAX_RETRY_WINDOW
  value: {{ .Values.settings.maxRetryWindow | quote }}
{{- end -}}

{{/* The gateway's settings: its address, its drain, the agents' tokens. */}}
{{- define "idemflow.gatewayEnv" -}}
- name: IDEMFLOW_HTTP_ADDR
  value: "0.0.0.0:8080"
- name: IDEMFLOW_SHUTDOWN_GRACE
  value: {{ .Values.settings.shutdownGrace | quote }}
{{- if .Values.agents.existingSecret }}
{{ include "idemflow.secretEnv" (dict "name" "IDEMFLOW_BOOTSTRAP_TOKENS" "secret" .Values.agents.existingSecret "key" .Values.agents.secretKey) }}
{{- else if .Values.agents.bootstrapTokens }}
{{ include "idemflow.secretEnv" (dict "name" "IDEMFLOW_BOOTSTRAP_TOKENS" "secret" (include "idemflow.secretName" .) "key" "IDEMFLOW_BOOTSTRAP_TOKENS") }}
{{- end }}
{{- end -}}

{{/* The files a process reads: Temporal's certificates, the HTTP tools, and a writable /tmp on a read-only root. */}}
{{- define "idemflow.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if and .Values.temporal.tls.enabled (or .Values.temporal.tls.existingSecret .Values.temporal.tls.cert) }}
- name: temporal-tls
  mountPath: /etc/idemflow/temporal-tls
  readOnly: true
{{- end }}
{{- if .Values.settings.tools }}
- name: tools
  mountPath: /etc/idemflow/tools
  readOnly: true
{{- end }}
{{- end -}}

{{- define "idemflow.volumes" -}}
{{- $v := .Values -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if and $v.temporal.tls.enabled (or $v.temporal.tls.existingSecret $v.temporal.tls.cert) }}
- name: temporal-tls
  secret:
    secretName: {{ $v.temporal.tls.existingSecret | default (include "idemflow.secretName" .) }}
    defaultMode: 0440
    items:
      - key: {{ ternary $v.temporal.tls.certKey "temporal-tls.crt" (not (empty $v.temporal.tls.existingSecret)) }}
        path: tls.crt
      - key: {{ ternary $v.temporal.tls.keyKey "temporal-tls.key" (not (empty $v.temporal.tls.existingSecret)) }}
        path: tls.key
{{- if or (and $v.temporal.tls.existingSecret $v.temporal.tls.caKey) $v.temporal.tls.ca }}
      - key: {{ ternary $v.temporal.tls.caKey "temporal-ca.crt" (not (empty $v.temporal.tls.existingSecret)) }}
        path: ca.crt
{{- end }}
{{- end }}
{{- if $v.settings.tools }}
- name: tools
  configMap:
    name: {{ include "idemflow.name" (dict "root" . "component" "tools") }}
{{- end }}
{{- end -}}

{{/* What every idemflow pod shares: security, placement, the grace of its drain. */}}
{{- define "idemflow.podSpec" -}}
{{- $v := .root.Values -}}
automountServiceAccountToken: false
enableServiceLinks: false
{{- with $v.imagePullSecrets }}
imagePullSecrets:
{{ toYaml . }}
{{- end }}
securityContext:
{{ toYaml $v.podSecurityContext | indent 2 }}
{{- with $v.nodeSelector }}
nodeSelector:
{{ toYaml . | indent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
{{ toYaml . }}
{{- end }}
{{- with $v.affinity }}
affinity:
{{ toYaml . | indent 2 }}
{{- end }}
{{- if and $v.topologySpread.enabled (not .job) }}
topologySpreadConstraints:
  - maxSkew: {{ $v.topologySpread.maxSkew }}
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
{{ include "idemflow.selectorLabels" . | indent 8 }}
  - maxSkew: {{ $v.topologySpread.maxSkew }}
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
{{ include "idemflow.selectorLabels" . | indent 8 }}
{{- end }}
volumes:
{{ include "idemflow.volumes" .root }}
{{- end -}}

{{/* A container's shared parts: image, security, mounts. */}}
{{- define "idemflow.container" -}}
image: {{ include "idemflow.image" .root | quote }}
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
securityContext:
{{ toYaml .root.Values.securityContext | indent 2 }}
volumeMounts:
{{ include "idemflow.volumeMounts" .root }}
{{- end -}}

{{/* The pod template's metadata: labels, and a checksum of the configuration so a change rolls the pods. */}}
{{- define "idemflow.podMetadata" -}}
labels:
{{ include "idemflow.selectorLabels" . | indent 2 }}
{{- with .root.Values.podLabels }}
{{ toYaml . | indent 2 }}
{{- end }}
annotations:
  checksum/config: {{ include (print .root.Template.BasePath "/config.yaml") .root | sha256sum }}
{{- with .root.Values.podAnnotations }}
{{ toYaml . | indent 2 }}
{{- end }}
{{- end -}}

{{/*
The policy linter's (kube-score's) checks this chart departs from, on
purpose: no CPU limit (values.yaml, Resources); IfNotPresent, since a
release's tag is never rebuilt (pin a digest in image.tag to be sure); and
spread over nodes and zones by topologySpreadConstraints rather than a
hard pod anti-affinity, which would leave a rollout's surge pod
unschedulable on a small cluster.
*/}}
{{- define "idemflow.lintExceptions" -}}
kube-score/ignore: container-resources,container-image-pull-policy,deployment-has-host-podantiaffinity
{{- end -}}
