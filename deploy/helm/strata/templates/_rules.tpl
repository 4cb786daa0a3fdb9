{{- /* The rules of deploy/rbac/<component>.yaml, where each one's reason is written. */}}

{{- define "strata.rules.ingest" -}}
- apiGroups: [""]
  resources: ["pods", "nodes"]
  verbs: ["list", "watch"]
- apiGroups: ["scheduling.k8s.io"]
  resources: ["priorityclasses"]
  verbs: ["list", "watch"]
- apiGroups: ["storage.k8s.io"]
  resources: ["csinodes"]
  verbs: ["list", "watch"]
- apiGroups: ["scheduling.volcano.sh"]
  resources: ["podgroups", "queues"]
  verbs: ["list", "watch"]
- apiGroups: ["topology.volcano.sh"]
  resources: ["hypernodes"]
  verbs: ["list", "watch"]
{{- end -}}

{{- define "strata.rules.binder" -}}
- apiGroups: [""]
  resources: ["pods/binding"]
  verbs: ["create"]
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get"]
{{- end -}}

{{- define "strata.rules.evictor" -}}
- apiGroups: [""]
  resources: ["pods/eviction"]
  verbs: ["create"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get"]
{{- end -}}

{{- define "strata.rules.evictor-volcano" -}}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "delete"]
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
{{- end -}}

{{- define "strata.rules.scheduler" -}}
- apiGroups: ["scheduling.volcano.sh"]
  resources: ["podgroups"]
  verbs: ["get", "update"]
- apiGroups: ["scheduling.volcano.sh"]
  resources: ["queues/status"]
  verbs: ["get", "update"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end -}}
