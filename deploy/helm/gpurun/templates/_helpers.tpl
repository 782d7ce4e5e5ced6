{{/*
Labels on every object's metadata: the kustomize overlays' part-of label
and Helm's own. Selectors and pod templates carry the overlays' labels
only, so that a DaemonSet applied with kubectl apply -k and one installed
by the chart select the same pods.
*/}}
{{- define "gpurun.labels" -}}
app.kubernetes.io/part-of: gpurun
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* The image every container runs. */}}
{{- define "gpurun.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/*
The node agent's settings (ConfigMap gpurun-node). Its name ends in a hash
of them, as kustomize's configMapGenerator names it: a change of settings
is a new ConfigMap, and the DaemonSet rolls out.
*/}}
{{- define "gpurun.nodeSettings" -}}
bin-dir: {{ .Values.nodeAgent.binDir | quote }}
containerd-config: {{ .Values.nodeAgent.containerdConfig | quote }}
distribution: {{ .Values.distribution | quote }}
drop-in: {{ include "gpurun.dropIn" . | quote }}
restart: {{ .Values.nodeAgent.restart | quote }}
set-as-default: {{ eq .Values.mode "default-runtime" | toString | quote }}
uninstall-on-exit: {{ .Values.nodeAgent.uninstallOnExit | toString | quote }}
{{- end -}}

{{/*
The node agent's drop-in directory (nodeAgent.dropIn): auto is
/etc/containerd/gpurun.d in mode default-runtime on containerd's own
layout, none elsewhere (k3s and RKE2 take gpurun's tables into their
template); none is none; a path is that path.
*/}}
{{- define "gpurun.dropIn" -}}
{{- $d := .Values.nodeAgent.dropIn | toString -}}
{{- if eq $d "auto" -}}
{{- if and (eq .Values.mode "default-runtime") (not (has .Values.distribution (list "k3s" "rke2"))) -}}
/etc/containerd/gpurun.d
{{- end -}}
{{- else if ne $d "none" -}}
{{ $d }}
{{- end -}}
{{- end -}}

{{- define "gpurun.nodeConfigMapName" -}}
gpurun-node-{{ include "gpurun.nodeSettings" . | sha256sum | trunc 10 }}
{{- end -}}

{{/* Where the pods' /dev/shm tmpfs are on the node: containerd's state. */}}
{{- define "gpurun.containerdState" -}}
{{- if has .Values.distribution (list "k3s" "rke2") -}}
/run/k3s/containerd
{{- else -}}
/run/containerd
{{- end -}}
{{- end -}}

{{/* nodeSelector, affinity and tolerations of a pod spec. */}}
{{- define "gpurun.scheduling" -}}
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

{{/*
"true" when the webhook takes its TLS from cert-manager: webhook.certManager
true, or auto and the cluster serves cert-manager.io/v1; "" otherwise (the
webhook's own CA).
*/}}
{{- define "gpurun.webhookCertManager" -}}
{{- $cm := .Values.webhook.certManager | toString -}}
{{- if or (eq $cm "true") (and (eq $cm "auto") (.Capabilities.APIVersions.Has "cert-manager.io/v1")) -}}
true
{{- end -}}
{{- end -}}

{{/*
The webhook pod's terminationGracePeriodSeconds: its shutdown delay (whole
seconds, the schema says), the 10 s it waits for reviews in flight, and
15 s to spare.
*/}}
{{- define "gpurun.webhookGracePeriod" -}}
{{- add (trimSuffix "s" (.Values.webhook.shutdownDelay | toString) | atoi) 25 -}}
{{- end -}}

{{/*
The webhook's matchConditions expression: a container or init container
with a GPU in its limits (an extended resource of a GPU vendor's, or of a
GPU DeviceClass), or a pod that names DRA resource claims. Generated from
gpurun's table of GPU evidence (kube/webhook.GPURequestCondition; a test
keeps the two equal).
*/}}
{{- define "gpurun.gpuRequestCondition" -}}
object.spec.containers.exists(c, has(c.resources) && has(c.resources.limits) &&
c.resources.limits.exists(r, r.startsWith("nvidia.com/") || r.startsWith("amd.com/") ||
r.startsWith("gpu.intel.com/") || r.startsWith("habana.ai/") || r in ["intel.com/gpu",
"intel.com/gaudi", "deviceclass.resource.kubernetes.io/gpu.nvidia.com",
"deviceclass.resource.kubernetes.io/mig.nvidia.com",
"deviceclass.resource.kubernetes.io/vfio.gpu.nvidia.com",
"deviceclass.resource.kubernetes.io/gpu.amd.com",
"deviceclass.resource.kubernetes.io/gpu.intel.com",
"deviceclass.resource.kubernetes.io/gpu-vfio.intel.com",
"deviceclass.resource.kubernetes.io/gaudi.intel.com"])) || (has(object.spec.initContainers) &&
object.spec.initContainers.exists(c, has(c.resources) && has(c.resources.limits) &&
c.resources.limits.exists(r, r.startsWith("nvidia.com/") || r.startsWith("amd.com/") ||
r.startsWith("gpu.intel.com/") || r.startsWith("habana.ai/") || r in ["intel.com/gpu",
"intel.com/gaudi", "deviceclass.resource.kubernetes.io/gpu.nvidia.com",
"deviceclass.resource.kubernetes.io/mig.nvidia.com",
"deviceclass.resource.kubernetes.io/vfio.gpu.nvidia.com",
"deviceclass.resource.kubernetes.io/gpu.amd.com",
"deviceclass.resource.kubernetes.io/gpu.intel.com",
"deviceclass.resource.kubernetes.io/gpu-vfio.intel.com",
"deviceclass.resource.kubernetes.io/gaudi.intel.com"]))) || (has(object.spec.resourceClaims) &&
size(object.spec.resourceClaims) > 0)
{{- end }}

{{/*
What the webhook's two entries share: the Service they call, its timeout,
the pods (CREATE) and the namespaces they see.
*/}}
{{- define "gpurun.webhookEntry" -}}
admissionReviewVersions: [v1]
sideEffects: None
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
matchPolicy: Equivalent
reinvocationPolicy: Never
clientConfig:
  service:
    name: gpurun-webhook
    namespace: {{ .Release.Namespace }}
    path: /mutate-pods
    port: 443
rules:
  - operations: [CREATE]
    apiGroups: [""]
    apiVersions: [v1]
    resources: [pods]
    scope: Namespaced
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: [kube-system, {{ .Release.Namespace }}]
    - key: gpurun.io/webhook
      operator: NotIn
      values: [disabled]
{{- end }}
