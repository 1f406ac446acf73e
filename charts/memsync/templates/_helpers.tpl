{{/* The one image of every memsync container: repository@digest, or repository:tag (default appVersion). */}}
{{- define "memsync.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* Object labels: the kustomize tree's (name, component, part-of) and Helm's own. */}}
{{- define "memsync.labels" -}}
app.kubernetes.io/name: {{ .name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
app.kubernetes.io/part-of: memsync
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The namespaces RBAC is granted in when rbac.scope is namespaced. */}}
{{- define "memsync.rbacNamespaces" -}}
{{- if and (eq .Values.rbac.scope "namespaced") (not .Values.operator.watchNamespaces) -}}
{{- fail "rbac.scope=namespaced needs operator.watchNamespaces: the namespaces to grant the operator access in" -}}
{{- end -}}
{{- if not (has .Values.rbac.scope (list "cluster" "namespaced")) -}}
{{- fail (printf "rbac.scope must be cluster or namespaced, got %q" .Values.rbac.scope) -}}
{{- end -}}
{{- if and (eq .Values.rbac.scope "namespaced") (include "memsync.namespacePatterns" .) -}}
{{- fail "rbac.scope=namespaced needs exact namespace names in operator.watchNamespaces, not patterns" -}}
{{- end -}}
{{- toJson .Values.operator.watchNamespaces -}}
{{- end -}}

{{/* Non-empty when a watched namespace is a pattern (agents-*): kopf then lists and watches Namespaces. */}}
{{- define "memsync.namespacePatterns" -}}
{{- range .Values.operator.watchNamespaces }}{{ if regexMatch "[*?\\[!]" . }}pattern{{ end }}{{ end -}}
{{- end -}}
