{{/*
The TOML config (docs/config.md) rendered from the values, and the small
TOML writer it needs: Helm reads every number as a float, and Helm's own
toToml writes 10 as 10.0, which the config refuses where it wants an
integer.
*/}}

{{/* One TOML value: a string, boolean, number or array of them. */}}
{{- define "tollgate.tomlValue" -}}
{{- if kindIs "string" . }}{{ toJson . }}
{{- else if kindIs "bool" . }}{{ . }}
{{- else if or (kindIs "float64" .) (kindIs "int" .) (kindIs "int64" .) }}
{{- if eq (float64 .) (floor .) }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- else if kindIs "slice" . }}[{{ range $i, $v := . }}{{ if $i }}, {{ end }}{{ include "tollgate.tomlValue" $v }}{{ end }}]
{{- else }}{{ fail (printf "config: %v (%s) cannot be written as a TOML value" . (kindOf .)) }}
{{- end }}
{{- end }}

{{- define "tollgate.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}{{ . }}{{ else }}{{ toJson . }}{{ end }}
{{- end }}

{{/*
The body of the table at .path from the map .map: a rule's usual keys
first (name, key, algorithm, limit, ...), then the other plain keys, then
sub-tables and arrays of tables (TOML wants the plain keys of a table
before any sub-table). A null value is left out.
*/}}
{{- define "tollgate.tomlBody" -}}
{{- $path := .path }}
{{- $m := .map }}
{{- $first := list "name" "key" "algorithm" "limit" "period" "burst" "lease" }}
{{- range $first }}
{{- if and (hasKey $m .) (not (kindIs "invalid" (get $m .))) }}
{{ . }} = {{ include "tollgate.tomlValue" (get $m .) }}
{{- end }}
{{- end }}
{{- range $k, $v := $m }}
{{- if and (not (has $k $first)) (not (kindIs "invalid" $v)) (not (kindIs "map" $v)) (not (and (kindIs "slice" $v) $v (kindIs "map" (first $v)))) }}
{{ include "tollgate.tomlKey" $k }} = {{ include "tollgate.tomlValue" $v }}
{{- end }}
{{- end }}
{{- range $k, $v := $m }}
{{- $sub := printf "%s.%s" $path (include "tollgate.tomlKey" $k) }}
{{- if kindIs "map" $v }}

[{{ $sub }}]
{{- include "tollgate.tomlBody" (dict "path" $sub "map" $v) }}
{{- else if and (kindIs "slice" $v) $v (kindIs "map" (first $v)) }}
{{- range $v }}

[[{{ $sub }}]]
{{- include "tollgate.tomlBody" (dict "path" $sub "map" .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tollgate.configToml" -}}
{{- if .Values.config.toml }}
{{- .Values.config.toml }}
{{- else }}
{{- $s := .Values.store }}
{{- $d := .Values.doors }}
# Rendered by the tollgate Helm chart from its values (docs/config.md).
# Reloaded by the running pods when the ConfigMap changes.
[store]
url = {{ include "tollgate.storeUrl" . | toJson }}
timeout = {{ $s.timeout | toJson }}
on_error = {{ $s.onError | toJson }}
prefix = {{ $s.prefix | toJson }}
{{- if not (kindIs "invalid" $s.maxKeys) }}
max_keys = {{ int64 $s.maxKeys }}
{{- end }}
{{- if ne $s.kind "memory" }}
replicas = {{ ternary (int64 .Values.autoscaling.minReplicas) (include "tollgate.replicas" .) .Values.autoscaling.enabled }}
{{- with $s.heartbeat }}
heartbeat = {{ toJson . }}
{{- end }}
{{- if and $s.password.existingSecret (eq $s.password.mountAs "file") }}
password_file = {{ include "tollgate.passwordFile" . | toJson }}
{{- end }}
{{- if $s.hybrid.enabled }}
hybrid = true
{{- if not (kindIs "invalid" $s.hybrid.batch) }}
hybrid_batch = {{ int64 $s.hybrid.batch }}
{{- end }}
{{- with $s.hybrid.lease }}
hybrid_lease = {{ toJson . }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $s.tls.enabled (or (and $s.tls.existingSecret (or $s.tls.caKey $s.tls.certKey)) $s.tls.serverName) }}

[store.tls]
{{- if and $s.tls.existingSecret $s.tls.caKey }}
ca_file = {{ printf "%s/ca.crt" (include "tollgate.tlsDir" .) | toJson }}
{{- end }}
{{- if and $s.tls.existingSecret $s.tls.certKey }}
cert_file = {{ printf "%s/tls.crt" (include "tollgate.tlsDir" .) | toJson }}
key_file = {{ printf "%s/tls.key" (include "tollgate.tlsDir" .) | toJson }}
{{- end }}
{{- with $s.tls.serverName }}
server_name = {{ toJson . }}
{{- end }}
{{- end }}
{{- with .Values.ops.readiness }}

[ops]
readiness = {{ toJson . }}
{{- end }}
{{- if and $d.http.enabled $d.http.legacyHeaders }}

[http]
legacy_headers = true
{{- end }}
{{- if $d.proxy.enabled }}

[proxy]
upstream = {{ $d.proxy.upstream | toJson }}
{{- with $d.proxy.trustedProxies }}
trusted_proxies = {{ include "tollgate.tomlValue" . }}
{{- end }}
{{- include "tollgate.tomlBody" (dict "path" "proxy" "map" $d.proxy.settings) }}
{{- end }}
{{- with .Values.config.metrics }}

[metrics]
{{- include "tollgate.tomlBody" (dict "path" "metrics" "map" .) }}
{{- end }}
{{- with .Values.config.envoySettings }}

[envoy]
{{- include "tollgate.tomlBody" (dict "path" "envoy" "map" .) }}
{{- end }}
{{- if $d.admin.enabled }}
{{- range $d.admin.tokens }}

[[admin.tokens]]
name = {{ .name | toJson }}
token_file = {{ printf "%s/%s" (include "tollgate.adminTokenDir" $) .name | toJson }}
{{- end }}
{{- end }}
{{- range .Values.config.rules }}

[[rules]]
{{- include "tollgate.tomlBody" (dict "path" "rules" "map" .) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
What serve reads only at start, from the TOML as the pods get it (rendered
or config.toml): [store] but what reloads (on_error, heartbeat, replicas:
scaling must not roll the pods), [admin], each listen address and [proxy]
send_timeout (docs/operations.md#reloading). The Deployment hashes it into
an annotation, so a change to one of them rolls the pods instead of
leaving them on the old store while reporting "needs a restart".
*/}}
{{- define "tollgate.startSettings" -}}
{{- $c := include "tollgate.configToml" . | fromToml }}
{{- $fixed := dict "store" (omit ($c.store | default dict) "on_error" "heartbeat" "replicas") }}
{{- $_ := set $fixed "admin" ($c.admin | default dict) }}
{{- range $table := list "http" "ops" "proxy" }}
{{- $_ := set $fixed $table (pick (get $c $table | default dict) "listen" "send_timeout") }}
{{- end }}
{{- with $c.Error }}{{ $_ := set $fixed "error" . }}{{ end }}
{{- toJson $fixed }}
{{- end }}
