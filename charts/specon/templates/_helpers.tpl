{{/* Names, labels and small computed values shared by the templates. */}}

{{- define "specon.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "specon.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains (include "specon.name" .) .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "specon.name" .) | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Common labels; call with (dict "ctx" $ "component" "manager"). */}}
{{- define "specon.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
{{ include "specon.selectorLabels" . }}
{{- end -}}

{{- define "specon.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specon.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "specon.manager.name" -}}{{ include "specon.fullname" . }}-manager{{- end -}}
{{- define "specon.agent.name" -}}{{ include "specon.fullname" . }}-agent{{- end -}}
{{- define "specon.scheduler.name" -}}{{ include "specon.fullname" . }}-scheduler{{- end -}}
{{- define "specon.tls.manager" -}}{{ include "specon.fullname" . }}-manager-tls{{- end -}}
{{- define "specon.tls.scheduler" -}}{{ include "specon.fullname" . }}-scheduler-tls{{- end -}}
{{- define "specon.tls.ca" -}}{{ include "specon.fullname" . }}-ca{{- end -}}
{{- define "specon.sharedClaim.name" -}}
{{- .Values.sharedVolume.existingClaim | default (printf "%s-shared" (include "specon.fullname" .)) -}}
{{- end -}}

{{/* The manager's in-cluster URLs: agents (HTTPS) and kube-scheduler (mutual TLS). */}}
{{- define "specon.manager.url" -}}
https://{{ include "specon.manager.name" . }}.{{ .Release.Namespace }}.svc:{{ .Values.manager.port }}
{{- end -}}
{{- define "specon.extender.url" -}}
https://{{ include "specon.manager.name" . }}.{{ .Release.Namespace }}.svc:{{ .Values.manager.extenderPort }}
{{- end -}}

{{- define "specon.image" -}}
{{- $tag := .image.tag | default .ctx.Chart.AppVersion -}}
{{ .image.repository }}:{{ $tag }}
{{- end -}}

{{- define "specon.scheduler.image" -}}
{{- $tag := .Values.scheduler.image.tag | default (regexReplaceAll "[-+].*$" .Capabilities.KubeVersion.Version "") -}}
{{ .Values.scheduler.image.repository }}:{{ $tag }}
{{- end -}}

{{/* The extenders list of a KubeSchedulerConfiguration (v1) that calls the manager, with the
  client certificate of Secret specon.tls.scheduler mounted at /etc/specon-scheduler/tls. */}}
{{- define "specon.extenders" -}}
extenders:
  - urlPrefix: {{ include "specon.extender.url" . | quote }}
    filterVerb: filter
    prioritizeVerb: prioritize
    weight: {{ .Values.scheduler.extender.weight }}
    nodeCacheCapable: {{ .Values.scheduler.extender.nodeCacheCapable }}
    ignorable: {{ .Values.scheduler.extender.ignorable }}
    enableHTTPS: true
    tlsConfig:
      certFile: /etc/specon-scheduler/tls/tls.crt
      keyFile: /etc/specon-scheduler/tls/tls.key
      caFile: /etc/specon-scheduler/tls/ca.crt
    httpTimeout: {{ .Values.scheduler.extender.httpTimeout }}
{{- end -}}

{{/* Pod-level hardening shared by the manager and the scheduler (non-root). */}}
{{- define "specon.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
