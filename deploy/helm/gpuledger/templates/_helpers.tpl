{{/*
Names and labels shared by every template.
*/}}

{{- define "gpuledger.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The release's base name: the release name when it already says gpuledger,
else <release>-gpuledger.
*/}}
{{- define "gpuledger.fullname" -}}
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

{{- define "gpuledger.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object; call with (dict "root" $ "component" "processor"). */}}
{{- define "gpuledger.labels" -}}
helm.sh/chart: {{ include "gpuledger.chart" .root }}
{{ include "gpuledger.selectorLabels" . }}
app.kubernetes.io/part-of: gpuledger
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end -}}

{{/* Labels a selector matches; same argument as gpuledger.labels. */}}
{{- define "gpuledger.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuledger.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end -}}

{{- define "gpuledger.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "gpuledger.tokensSecret" -}}
{{- required "tokens.secretName is required" .Values.tokens.secretName -}}
{{- end -}}

{{- define "gpuledger.configName" -}}
{{- printf "%s-config" (include "gpuledger.fullname" .) -}}
{{- end -}}

{{- define "gpuledger.historyClaim" -}}
{{- default (printf "%s-history" (include "gpuledger.fullname" .)) .Values.history.existingClaim -}}
{{- end -}}

{{- define "gpuledger.webhookService" -}}
{{- printf "%s-webhook" (include "gpuledger.fullname" .) -}}
{{- end -}}

{{- define "gpuledger.webhookTlsSecret" -}}
{{- if .Values.webhook.certManager.enabled -}}
{{- printf "%s-webhook-tls" (include "gpuledger.fullname" .) -}}
{{- else -}}
{{- required "webhook.tlsSecretName is required when webhook.certManager.enabled is false" .Values.webhook.tlsSecretName -}}
{{- end -}}
{{- end -}}

{{/* The Kafka bootstrap servers: the value, else the Strimzi example's. */}}
{{- define "gpuledger.kafkaBootstrap" -}}
{{- if .Values.kafka.bootstrap -}}
{{- .Values.kafka.bootstrap -}}
{{- else if .Values.strimzi.enabled -}}
{{- printf "%s-kafka-bootstrap.%s.svc:%s" .Values.strimzi.clusterName .Values.strimzi.namespace (include "gpuledger.strimziClientPort" .) -}}
{{- else -}}
{{- fail "kafka.bootstrap is required (or strimzi.enabled)" -}}
{{- end -}}
{{- end -}}

{{/* NS=TENANT,NS=TENANT from tenants.namespaces, in key order. */}}
{{- define "gpuledger.k8sNamespaces" -}}
{{- $pairs := list -}}
{{- range $ns, $tenant := .Values.tenants.namespaces -}}
{{- $pairs = append $pairs (printf "%s=%s" $ns $tenant) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* Scrape annotations for a pod serving /metrics on the given port. */}}
{{- define "gpuledger.scrapeAnnotations" -}}
{{- if .root.Values.prometheusAnnotations -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end -}}
{{- end -}}

{{/* Settings every gpuledger container takes from the shared ConfigMap, plus Kafka options from a Secret. */}}
{{- define "gpuledger.envFrom" -}}
- configMapRef:
    name: {{ include "gpuledger.configName" . }}
{{- end -}}

{{- define "gpuledger.kafkaOptionsEnv" -}}
{{- if .Values.kafka.optionsSecret.name -}}
- name: GPULEDGER_KAFKA_OPTIONS
  valueFrom:
    secretKeyRef:
      name: {{ .Values.kafka.optionsSecret.name }}
      key: {{ required "kafka.optionsSecret.key is required with kafka.optionsSecret.name" .Values.kafka.optionsSecret.key }}
{{- end -}}
{{- end -}}

{{/* Pod and container security for the processor, query and compaction pods (restricted). */}}
{{- define "gpuledger.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "gpuledger.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* A topic's full name; call with (dict "root" $ "topic" "ledger"). */}}
{{- define "gpuledger.topic" -}}
{{- printf "%sgpuledger.%s" .root.Values.kafka.topicPrefix .topic -}}
{{- end -}}

{{/* kafka.security.protocol, checked: plaintext, ssl or sasl_ssl. */}}
{{- define "gpuledger.kafkaProtocol" -}}
{{- $p := .Values.kafka.security.protocol -}}
{{- if not (has $p (list "plaintext" "ssl" "sasl_ssl")) -}}
{{- fail (printf "kafka.security.protocol %q: use plaintext, ssl or sasl_ssl" $p) -}}
{{- end -}}
{{- $p -}}
{{- end -}}

{{/* The port of the Strimzi example's client listener. */}}
{{- define "gpuledger.strimziClientPort" -}}
{{- if eq (include "gpuledger.kafkaProtocol" .) "plaintext" -}}9092{{- else -}}9093{{- end -}}
{{- end -}}

{{/* The SCRAM user of a component; call with (dict "root" $ "user" "collector"). */}}
{{- define "gpuledger.kafkaUser" -}}
{{- required (printf "kafka.users.%s is required with kafka.security.protocol sasl_ssl" .user) (index .root.Values.kafka.users .user) -}}
{{- end -}}

{{/*
Kafka security settings of a Kafka client container (collector, processor);
same argument as gpuledger.kafkaUser.
*/}}
{{- define "gpuledger.kafkaClientEnv" -}}
{{- $p := include "gpuledger.kafkaProtocol" .root -}}
{{- $sec := .root.Values.kafka.security -}}
- name: GPULEDGER_KAFKA_SECURITY_PROTOCOL
  value: {{ $p }}
{{- if and (ne $p "plaintext") $sec.caSecret }}
- name: GPULEDGER_KAFKA_CA
  value: /etc/gpuledger/kafka-ca/{{ $sec.caKey }}
{{- end }}
{{- if eq $p "sasl_ssl" }}
- name: GPULEDGER_KAFKA_SASL_MECHANISM
  value: {{ $sec.saslMechanism }}
- name: GPULEDGER_KAFKA_SASL_USERNAME
  value: {{ include "gpuledger.kafkaUser" . }}
- name: GPULEDGER_KAFKA_SASL_PASSWORD_FILE
  value: /etc/gpuledger/kafka-user/password
{{- end }}
{{- end -}}

{{/* Their mounts; call with the root context. Empty for plaintext without a login. */}}
{{- define "gpuledger.kafkaClientMounts" -}}
{{- $p := include "gpuledger.kafkaProtocol" . -}}
{{- if and (ne $p "plaintext") .Values.kafka.security.caSecret }}
- name: kafka-ca
  mountPath: /etc/gpuledger/kafka-ca
  readOnly: true
{{- end }}
{{- if eq $p "sasl_ssl" }}
- name: kafka-user
  mountPath: /etc/gpuledger/kafka-user
  readOnly: true
{{- end }}
{{- end -}}

{{/* Their volumes; same argument as gpuledger.kafkaUser. */}}
{{- define "gpuledger.kafkaClientVolumes" -}}
{{- $p := include "gpuledger.kafkaProtocol" .root -}}
{{- $sec := .root.Values.kafka.security -}}
{{- if and (ne $p "plaintext") $sec.caSecret }}
# The brokers' CA (for Strimzi, a copy of its cluster CA).
- name: kafka-ca
  secret:
    secretName: {{ $sec.caSecret }}
    items:
      - key: {{ required "kafka.security.caKey is required with kafka.security.caSecret" $sec.caKey }}
        path: {{ $sec.caKey }}
{{- end }}
{{- if eq $p "sasl_ssl" }}
# The SCRAM password (for Strimzi, written by its user operator).
- name: kafka-user
  secret:
    secretName: {{ include "gpuledger.kafkaUser" . }}
    defaultMode: 0440
    items:
      - key: password
        path: password
{{- end }}
{{- end -}}
