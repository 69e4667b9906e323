{{/* Names, labels and the values every template derives the same way. */}}

{{- define "tollgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name; short enough for a "-proxy" suffix. */}}
{{- define "tollgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 56 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 56 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 56 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tollgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tollgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tollgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "tollgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tollgate
{{- end }}

{{- define "tollgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tollgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tollgate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Pods wanted: replicaCount, else 1 on the memory store and 2 on Redis. */}}
{{- define "tollgate.replicas" -}}
{{- if not (kindIs "invalid" .Values.replicaCount) }}
{{- int64 .Values.replicaCount }}
{{- else if eq .Values.store.kind "memory" }}1
{{- else }}2
{{- end }}
{{- end }}

{{/* The most pods that may run at once: what a memory store multiplies. */}}
{{- define "tollgate.maxPods" -}}
{{- if .Values.autoscaling.enabled }}
{{- int64 .Values.autoscaling.maxReplicas }}
{{- else }}
{{- include "tollgate.replicas" . }}
{{- end }}
{{- end }}

{{/* Paths inside the pod (INTERFACE: /etc/tollgate, secrets under it). */}}
{{- define "tollgate.configDir" -}}/etc/tollgate{{- end }}
{{- define "tollgate.passwordFile" -}}/etc/tollgate/secrets/redis-password{{- end }}
{{- define "tollgate.tlsDir" -}}/etc/tollgate/secrets/tls{{- end }}
{{- define "tollgate.adminTokenDir" -}}/etc/tollgate/secrets/admin{{- end }}

{{/* The store URL the ConfigMap names. */}}
{{- define "tollgate.storeUrl" -}}
{{- $s := .Values.store }}
{{- $user := "" }}
{{- if $s.username }}{{ $user = printf "%s@" $s.username }}{{ end }}
{{- if $s.url }}
{{- $s.url }}
{{- else if eq $s.kind "memory" }}memory
{{- else if eq $s.kind "redis" }}
{{- printf "%s://%s%s:%d" (ternary "rediss" "redis" $s.tls.enabled) $user $s.redis.host (int64 $s.redis.port) }}
{{- with $s.redis.db }}/{{ int64 . }}{{ end }}
{{- else if eq $s.kind "sentinel" }}
{{- printf "redis+sentinel://%s%s/%s" $user (join "," $s.sentinel.hosts) $s.sentinel.masterName }}
{{- else if eq $s.kind "cluster" }}
{{- printf "redis+cluster://%s%s" $user (join "," $s.cluster.nodes) }}
{{- end }}
{{- end }}

{{/*
Refuses values that would deploy something broken, with the value to
change. values.schema.json catches types and names first; these are the
rules across several values.
*/}}
{{- define "tollgate.validate" -}}
{{- $s := .Values.store }}
{{- $d := .Values.doors }}
{{- if not (has $s.kind (list "memory" "redis" "sentinel" "cluster")) }}
{{- fail (printf "store.kind %q is not a store: use memory, redis, sentinel or cluster" $s.kind) }}
{{- end }}
{{- /* user:password@ (the userinfo runs to the last @, as serve reads it) */}}
{{- $secretHow := "put the password in a Secret: store.password.existingSecret (store.username names the ACL user), or the whole URL in store.urlSecret" }}
{{- if regexMatch "://.*:.*@" $s.url }}
{{- fail (printf "store.url carries a password (user:password@), which would be written into the ConfigMap: %s" $secretHow) }}
{{- end }}
{{- with .Values.config.toml }}
{{- $url := (fromToml .).store | default dict | dig "url" "" }}
{{- if and (kindIs "string" $url) (regexMatch "://.*:.*@" $url) }}
{{- fail (printf "config.toml's [store] url carries a password (user:password@), which would be written into the ConfigMap: set store.password.existingSecret and write password_file = %q in [store], or put the whole URL in store.urlSecret" (include "tollgate.passwordFile" $)) }}
{{- end }}
{{- end }}
{{- $pods := int64 (include "tollgate.maxPods" .) }}
{{- if and (eq $s.kind "memory") (gt $pods 1) (not $s.memory.allowReplicas) }}
{{- fail (printf "store.kind=memory keeps each pod's counters apart: %d pods would admit %d times every limit. Use a Redis store (store.kind=redis, sentinel or cluster), or set store.memory.allowReplicas=true to accept it" $pods $pods) }}
{{- end }}
{{- if and (eq $s.kind "memory") $s.url (ne $s.url "memory") }}
{{- fail (printf "store.url %q names a Redis store: set store.kind to redis, sentinel or cluster too (it sets the replica default and the checks)" $s.url) }}
{{- end }}
{{- if and (eq $s.kind "memory") $s.hybrid.enabled }}
{{- fail "store.hybrid.enabled takes its batches from Redis: set store.kind to redis, sentinel or cluster" }}
{{- end }}
{{- if and (eq $s.kind "memory") (or $s.password.existingSecret $s.urlSecret.name $s.tls.enabled) }}
{{- fail "store.password, store.urlSecret and store.tls apply to Redis stores, not store.kind=memory" }}
{{- end }}
{{- if and $s.tls.enabled (ne $s.kind "redis") }}
{{- fail (printf "store.tls is for standalone Redis (rediss://), not store.kind=%s" $s.kind) }}
{{- end }}
{{- if and (or $s.tls.certKey $s.tls.keyKey) (not (and $s.tls.certKey $s.tls.keyKey)) }}
{{- fail "store.tls.certKey and store.tls.keyKey go together: a client certificate needs its key" }}
{{- end }}
{{- if and $s.tls.enabled $s.tls.certKey (not $s.tls.existingSecret) }}
{{- fail "store.tls.certKey needs store.tls.existingSecret: the Secret holding the client certificate" }}
{{- end }}
{{- if and (eq $s.kind "sentinel") (not $s.sentinel.hosts) }}
{{- fail "store.kind=sentinel needs store.sentinel.hosts" }}
{{- end }}
{{- if and (eq $s.kind "cluster") (not $s.cluster.nodes) }}
{{- fail "store.kind=cluster needs store.cluster.nodes" }}
{{- end }}
{{- if not (or $d.http.enabled $d.grpc.enabled $d.proxy.enabled) }}
{{- fail "no front door: enable doors.http, doors.grpc or doors.proxy" }}
{{- end }}
{{- if and $d.proxy.enabled (not $d.proxy.upstream) (not .Values.config.toml) }}
{{- fail "doors.proxy.enabled needs doors.proxy.upstream (http://host:port): where admitted requests go" }}
{{- end }}
{{- if and (not .Values.config.toml) (not .Values.config.rules) (not $d.grpc.enabled) }}
{{- fail "config.rules is empty: the HTTP API and the proxy need at least one rule (with doors.grpc, the Envoy files may bring them all)" }}
{{- end }}
{{- if and $d.grpc.enabled (not .Values.envoy.configs) }}
{{- fail "doors.grpc.enabled needs envoy.configs: the envoyproxy/ratelimit files it serves" }}
{{- end }}
{{- if and .Values.envoy.configs (not $d.grpc.enabled) }}
{{- fail "envoy.configs are served by the gRPC door: set doors.grpc.enabled=true" }}
{{- end }}
{{- if and $d.admin.enabled (not $d.admin.tokens) }}
{{- fail "doors.admin.enabled needs doors.admin.tokens: the admin API refuses to listen beyond loopback without a token" }}
{{- end }}
{{- $names := list }}
{{- range $d.admin.tokens }}
{{- if not (and .name .existingSecret .key) }}
{{- fail "each doors.admin.tokens entry needs name, existingSecret and key" }}
{{- end }}
{{- /* each name is a file's path in the projected volume */}}
{{- if has .name $names }}
{{- fail (printf "doors.admin.tokens: the name %q is given twice; each token needs its own (it names its file and, in the audit log, its holder)" .name) }}
{{- end }}
{{- $names = append $names .name }}
{{- end }}
{{- /* one listener per port, or the pod crash-loops: address in use */}}
{{- $taken := dict }}
{{- range $door := list "http" "grpc" "proxy" "admin" "ops" }}
{{- $v := ternary $.Values.ops (get $d $door) (eq $door "ops") }}
{{- if or (eq $door "ops") $v.enabled }}
{{- $port := toString (int64 $v.port) }}
{{- $value := ternary "ops.port" (printf "doors.%s.port" $door) (eq $door "ops") }}
{{- with get $taken $port }}
{{- fail (printf "%s and %s are both %s: each enabled door and the ops listener need a port of their own" . $value $port) }}
{{- end }}
{{- $_ := set $taken $port $value }}
{{- end }}
{{- end }}
{{- if and .Values.autoscaling.enabled (lt (int64 .Values.autoscaling.maxReplicas) (int64 .Values.autoscaling.minReplicas)) }}
{{- fail "autoscaling.maxReplicas is below autoscaling.minReplicas" }}
{{- end }}
{{- end }}
