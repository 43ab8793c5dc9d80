{{- define "etj.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "etj.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "etj.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "etj.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "etj.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The operator's permissions: exactly what etj.controller.kube, kopf's watches and
     events use (the leader Lease has its own Role). Shared by the ClusterRole and the
     per-namespace Roles. */}}
{{- define "etj.rules" -}}
- apiGroups: [training.etj.dev]
  resources: [embeddingtrainingjobs]
  verbs: [get, list, watch, patch, delete]
- apiGroups: [training.etj.dev]
  resources: [embeddingtrainingjobs/status]
  verbs: [patch]
{{- /* Every object the operator creates names its job as owner with blockOwnerDeletion
     (deleting a job in the foreground waits for its pods). Where the API server enables
     OwnerReferencesPermissionEnforcement (OpenShift), setting blockOwnerDeletion needs
     update on the owner's finalizers; without it no pod, Service or ConfigMap is created. */}}
- apiGroups: [training.etj.dev]
  resources: [embeddingtrainingjobs/finalizers]
  verbs: [update]
{{- /* patch: a Kueue-queued job's pods get Kueue's retriable-in-group mark when the job
     ends, and lose Kueue's finalizer when etj replaces them (etj.core.reconcile.policies.queue). */}}
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, create, delete, patch]
- apiGroups: [""]
  resources: [services, configmaps]
  verbs: [create]
{{- /* checkpoint.storage: the job's ReadWriteMany claim (create); checkpoint.volume and
     data.files.volume claims: their access modes decide whether a multi-pod job may use
     them (get). */}}
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, create]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create]
{{- /* get: a Kueue-queued job's group Workload, whose owners (its pods) say whether Kueue
     has adopted a requeued group's new pods before etj lets go of the last old one
     (etj.core.reconcile.policies.queue). */}}
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [get]
{{- if .Values.networkPolicy.enabled }}
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [create]
{{- end }}
{{- end -}}


{{/* Gang scheduling: the gang objects of the chosen backends (gangScheduling.backends),
     with exactly the verbs etj.controller.kube uses on them: get (is it as wanted?), create, and
     delete for a Workload (its pod groups are immutable: remade when the plan changes) or
     patch for a PodGroup. */}}
{{- define "etj.gangRules" -}}
{{- range .Values.gangScheduling.backends }}
{{- if eq . "Workload" }}
- apiGroups: [scheduling.k8s.io]
  resources: [workloads]
  verbs: [get, create, delete]
{{- else if eq . "Volcano" }}
- apiGroups: [scheduling.volcano.sh]
  resources: [podgroups]
  verbs: [get, create, patch]
{{- else if eq . "SchedulerPlugins" }}
- apiGroups: [scheduling.x-k8s.io]
  resources: [podgroups]
  verbs: [get, create, patch]
{{- end }}
{{- end }}
{{- end -}}
