{{/*
Names: <release>-strata-<component>, or <release>-<component> when the release name already
says strata. Truncated to 52 characters so that a StatefulSet's pod names (plus "-NN" and the
controller-revision-hash label) stay within Kubernetes' 63.
*/}}
{{- define "strata.fullname" -}}
{{- if contains "strata" .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-strata" .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "strata.componentName" -}}
{{- printf "%s-%s" (include "strata.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "strata.selectorLabels" -}}
app.kubernetes.io/name: strata
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "strata.labels" -}}
{{ include "strata.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "strata.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The evictor's ServiceAccount and RBAC depend on its mode: Volcano's DELETE needs more. */}}
{{- define "strata.evictorAccount" -}}
{{- if eq .Values.evictor.mode "volcano" -}}evictor-volcano{{- else -}}evictor{{- end -}}
{{- end -}}

{{/* --scheduler-name and --default-queue: what the fold computes, the same for every component */}}
{{- define "strata.foldArgs" -}}
{{- range .Values.schedulerNames }}
- --scheduler-name
- {{ . | quote }}
{{- end }}
{{- with .Values.defaultQueue }}
- --default-queue
- {{ . | quote }}
{{- end }}
{{- end -}}

{{- define "strata.kafkaArgs" -}}
{{- range $key, $value := .Values.kafka.properties }}
{{- /* YAML numbers arrive as floats: 1000000 would print as 1e+06 */}}
{{- if and (kindIs "float64" $value) (eq $value (floor $value)) }}
{{- $value = int64 $value }}
{{- end }}
- -X
- {{ printf "%s=%v" $key $value | quote }}
{{- end }}
{{- end -}}

{{- define "strata.httpArgs" -}}
- --http-port
- {{ .Values.http.port | quote }}
- --http-host
- {{ .Values.http.host | quote }}
{{- end -}}

{{/*
Environment of every container. Secret values come only through secretKeyRef: the chart never
holds a password, and a rendering or `helm get values` shows none.
*/}}
{{- define "strata.env" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
- name: POD_NAME
  valueFrom:
    fieldRef: {fieldPath: metadata.name}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef: {fieldPath: metadata.namespace}
- name: STRATA_TOPIC_PREFIX
  value: {{ $v.topicPrefix | quote }}
- name: STRATA_DATA_DIR
  value: /var/lib/strata
- name: STRATA_REPLICATION_FACTOR
  value: {{ $v.kafka.replicationFactor | quote }}
- name: STRATA_MIN_INSYNC_REPLICAS
  value: {{ $v.kafka.minInsyncReplicas | quote }}
- name: STRATA_COMMAND_PARTITIONS
  value: {{ $v.kafka.commandPartitions | quote }}
- name: STRATA_RETRY_DELAYS
  value: {{ $v.kafka.retryDelays | quote }}
- name: STRATA_KAFKA_BOOTSTRAP
  valueFrom:
    secretKeyRef: {name: {{ $v.kafka.secretName | quote }}, key: STRATA_KAFKA_BOOTSTRAP}
{{- range list "STRATA_KAFKA_SECURITY_PROTOCOL" "STRATA_KAFKA_SASL_MECHANISMS" "STRATA_KAFKA_SASL_USERNAME" "STRATA_KAFKA_SASL_PASSWORD" "STRATA_KAFKA_SSL_KEY_PASSWORD" }}
- name: {{ . }}
  valueFrom:
    secretKeyRef: {name: {{ $v.kafka.secretName | quote }}, key: {{ . }}, optional: true}
{{- end }}
{{- with $v.kafka.tls }}
{{- if .enabled }}
- name: STRATA_KAFKA_SSL_CA_LOCATION
  value: /etc/strata/kafka-tls/{{ .caKey }}
{{- if .certificateKey }}
- name: STRATA_KAFKA_SSL_CERTIFICATE_LOCATION
  value: /etc/strata/kafka-tls/{{ .certificateKey }}
{{- end }}
{{- if .keyKey }}
- name: STRATA_KAFKA_SSL_KEY_LOCATION
  value: /etc/strata/kafka-tls/{{ .keyKey }}
{{- end }}
{{- end }}
{{- end }}
{{- if .kube }}
- name: KUBECONFIG
  value: /etc/strata/kube/kubeconfig
{{- end }}
{{- if and .db $v.checkpoints.database.secretName }}
- name: STRATA_DB_URL
  valueFrom:
    secretKeyRef: {name: {{ $v.checkpoints.database.secretName | quote }}, key: {{ $v.checkpoints.database.key | quote }}}
{{- end }}
{{- with $v.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- with .values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "strata.probes" -}}
{{- $p := .Values.probes -}}
startupProbe:
  httpGet: {path: /healthz, port: metrics}
  {{- toYaml $p.startup | nindent 2 }}
livenessProbe:
  httpGet: {path: /healthz, port: metrics}
  {{- toYaml $p.liveness | nindent 2 }}
readinessProbe:
  httpGet: {path: /readyz, port: metrics}
  {{- toYaml $p.readiness | nindent 2 }}
{{- end -}}

{{/* The pod's annotations: Prometheus' scrape annotations where it serves, then podAnnotations. */}}
{{- define "strata.podAnnotations" -}}
{{- $v := .root.Values -}}
{{- $annotations := dict -}}
{{- if and .serve $v.metrics.annotations -}}
{{- $_ := set $annotations "prometheus.io/scrape" "true" -}}
{{- $_ := set $annotations "prometheus.io/port" ($v.http.port | toString) -}}
{{- $_ := set $annotations "prometheus.io/path" "/metrics" -}}
{{- end -}}
{{- $annotations = merge (deepCopy ($v.podAnnotations | default dict)) $annotations (.annotations | default dict) -}}
{{- if $annotations -}}
{{ toYaml $annotations }}
{{- end -}}
{{- end -}}

{{/*
A pod of one component. Parameters: root, component, values (the component's values), args (the
strata command line, a list), account (ServiceAccount suffix, or "" for none: no token mounted),
db (STRATA_DB_URL when PostgreSQL is set), claim (the data directory is the StatefulSet's claim
"data" instead of an emptyDir), serve (the HTTP port and the probes); optional: volumes and
mounts (more of each, lists), annotations (more pod annotations, a dict).
*/}}
{{- define "strata.podTemplate" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
metadata:
  labels:
    {{- include "strata.labels" . | nindent 4 }}
    {{- with $v.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with include "strata.podAnnotations" . }}
  annotations:
    {{- . | nindent 4 }}
  {{- end }}
spec:
  {{- if .account }}
  serviceAccountName: {{ include "strata.componentName" (dict "root" $root "component" .account) }}
  automountServiceAccountToken: true
  {{- else }}
  automountServiceAccountToken: false
  {{- end }}
  {{- with $v.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $v.podSecurityContext | nindent 4 }}
  terminationGracePeriodSeconds: {{ .values.terminationGracePeriodSeconds | default 30 }}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if .restartPolicy }}
  restartPolicy: {{ .restartPolicy }}
  {{- end }}
  containers:
    - name: {{ .component }}
      image: {{ include "strata.image" $root | quote }}
      imagePullPolicy: {{ $v.image.pullPolicy }}
      command:
        - strata
      args:
        {{- toYaml .args | nindent 8 }}
        {{- with include "strata.kafkaArgs" $root | trim }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- if .serve }}
        {{- include "strata.httpArgs" $root | nindent 8 }}
        {{- end }}
        {{- with .values.extraArgs }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      env:
        {{- include "strata.env" (dict "root" $root "values" .values "kube" (ne .account "") "db" .db) | nindent 8 }}
      {{- if .serve }}
      ports:
        - name: metrics
          containerPort: {{ $v.http.port }}
          protocol: TCP
      {{- include "strata.probes" $root | nindent 6 }}
      {{- end }}
      resources:
        {{- toYaml .values.resources | nindent 8 }}
      securityContext:
        {{- toYaml $v.securityContext | nindent 8 }}
      volumeMounts:
        - {name: data, mountPath: /var/lib/strata}
        - {name: tmp, mountPath: /tmp}
        {{- if .account }}
        - {name: kubeconfig, mountPath: /etc/strata/kube, readOnly: true}
        {{- end }}
        {{- if $v.kafka.tls.enabled }}
        - {name: kafka-tls, mountPath: /etc/strata/kafka-tls, readOnly: true}
        {{- end }}
        {{- with .mounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    {{- if not .claim }}
    - name: data
      emptyDir: {}
    {{- end }}
    - name: tmp
      emptyDir: {}
    {{- if .account }}
    - name: kubeconfig
      configMap:
        name: {{ include "strata.componentName" (dict "root" $root "component" "kubeconfig") }}
    {{- end }}
    {{- if $v.kafka.tls.enabled }}
    - name: kafka-tls
      secret:
        secretName: {{ $v.kafka.tls.secretName }}
        defaultMode: 0440  # group: the pod's fsGroup
    {{- end }}
    {{- with .volumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}
