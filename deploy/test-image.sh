#!/usr/bin/env bash
# Builds the container image (deploy/build-image.sh) and runs it with
# podman the way Kubernetes runs it: the config from a mounted directory
# laid out as a ConfigMap volume, a read-only root, a non-root user. Checks
# a decision and a 429, /healthz, the uid, a reload when the ConfigMap's
# `..data` symlink is swapped, and that SIGTERM drains and exits 0; then
# the image's own default config, and the systemd unit against the binary in the image (docs/container.md,
# docs/systemd.md).
#
#   deploy/test-image.sh [build-image.sh arguments]
#   TOLLGATE_IMAGE=localhost/tollgate:0.1.0 deploy/test-image.sh   # test a built image
#
# Every wait is bounded polling with a deadline; no check depends on how
# long anything takes. Containers and files are removed on exit.
# The unit's own checks are deploy/systemd/test-unit.sh's.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=deploy/test-lib.sh
. deploy/test-lib.sh
started=$SECONDS

work="$(mktemp -d /tmp/tollgate-image-test.XXXXXX)"
names=()
cleanup() {
  local name
  for name in "${names[@]}"; do
    "${podman[@]}" rm -f -t 0 "$name" >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

if [ -n "${TOLLGATE_IMAGE:-}" ]; then
  image="$TOLLGATE_IMAGE"
else
  image="$(bash deploy/build-image.sh "$@" | tail -n 1)"
fi
"${podman[@]}" image exists "$image" || fail "no image $image after the build"
echo "test-image.sh: testing $image ($(("${SECONDS}" - started)) s to build)"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# curl_status URL [curl args]: the HTTP status; the body in $work/body.
curl_status() {
  local url="$1"
  shift
  curl -sS -m 10 -o "$work/body" -w '%{http_code}' "$@" "$url" || true
}

check() {
  curl_status "$base/v1/check" -H 'content-type: application/json' \
    -d "{\"rule\":\"per_key\",\"key\":\"$1\"}"
}

# The limit /v1/rules shows for the rule per_key (empty when unreadable).
rule_limit() {
  curl -sS -m 10 "$base/v1/rules" 2>/dev/null | python3 -c '
import json, sys
try:
    rules = json.load(sys.stdin)["rules"]
    print(next(r["limit"] for r in rules if r["name"] == "per_key"))
except Exception:
    print("")' || true
}

# run_server NAME HOST-PORT [podman run args...] -- [container args...]
# Read-only with no writable /tmp either (podman mounts tmpfs there by
# default; Kubernetes' readOnlyRootFilesystem does not).
run_server() {
  local name="$1" port="$2" opts=()
  ops_port="$(free_port)"
  shift 2
  while [ "$1" != "--" ]; do
    opts+=("$1")
    shift
  done
  shift
  names+=("$name")
  "${podman[@]}" run -d --name "$name" "${limits[@]}" --read-only --read-only-tmpfs=false \
    -p "127.0.0.1:$port:8080" -p "127.0.0.1:$ops_port:9090" "${opts[@]}" "$image" "$@" >/dev/null
}

healthy() { [ "$(curl_status "$base/healthz")" = 200 ]; }

# A config directory as kubelet writes a ConfigMap volume: the files in a
# timestamped directory, `..data` a symlink to it, each key a symlink
# through `..data`. An update writes a new directory, points a new
# symlink at it and renames that over `..data` (atomic), then removes
# the old directory.
config="$work/config"
write_config() {
  local dir="$config/$1" limit="$2"
  mkdir -p "$dir"
  # No listen address: the image's TOLLGATE_HTTP and TOLLGATE_OPS put
  # the HTTP API and the ops listener on all interfaces.
  cat >"$dir/tollgate.toml" <<EOF
[store]
url = "memory"

[[rules]]
name = "per_key"
algorithm = "sliding_log"
limit = $limit
period = "1h"
key = "header:x-key"
EOF
  chmod 0755 "$dir"
  chmod 0644 "$dir/tollgate.toml"
}
mkdir -p "$config"
chmod 0755 "$config"
write_config ..2026_01_01_00_00_00.000000001 2
ln -s ..2026_01_01_00_00_00.000000001 "$config/..data"
ln -s ..data/tollgate.toml "$config/tollgate.toml"

name="tollgate-test-$$"
port="$(free_port)"
base="http://127.0.0.1:$port"
run_server "$name" "$port" -v "$config:/etc/tollgate:ro" --
wait_for healthy \
  || fail "GET /healthz never answered 200 (last: $(curl_status "$base/healthz")); logs: $("${podman[@]}" logs "$name" 2>&1)"
pass "serving from the mounted ConfigMap-style directory on $base"

expect "GET /healthz body" "$(cat "$work/body")" '{"status":"ok"}'
# the ops listener (the image's TOLLGATE_OPS): what Kubernetes probes
ops="http://127.0.0.1:$ops_port"
expect "ops GET /healthz" "$(curl_status "$ops/healthz")" 200
expect "ops GET /readyz: status and store" "$(curl -sS -m 10 "$ops/readyz" |
  python3 -c 'import json, sys; b = json.load(sys.stdin); print(b.get("status"), b.get("store"))' 2>&1)" "ready up"
# Read whole first: grep -q quits at its match, and under pipefail the
# curl it cut off (exit 23) would fail the check.
metrics="$(curl -sS -m 10 "$ops/metrics" || true)"
grep -q '^tollgate_store_up 1' <<<"$metrics" \
  || fail "ops GET /metrics has no 'tollgate_store_up 1': $(head -c 400 <<<"$metrics")"
pass "ops GET /metrics: tollgate_store_up 1"
expect "ops GET /v1/check (not an ops path)" "$(curl_status "$ops/v1/check")" 404

expect "the container's user (podman inspect)" \
  "$("${podman[@]}" inspect "$name" --format '{{.Config.User}}')" "65532:65532"
expect "the serving process's uid (podman top)" \
  "$("${podman[@]}" top "$name" huser | tail -n +2 | tr -d ' ')" "65532"
expect "the root filesystem is read-only" \
  "$("${podman[@]}" inspect "$name" --format '{{.HostConfig.ReadonlyRootfs}}')" "true"

expect "POST /v1/check, 1st of 2" "$(check k1)" 200
expect "POST /v1/check, 2nd of 2" "$(check k1)" 200
expect "POST /v1/check, 3rd of 2" "$(check k1)" 429
expect "GET /v1/rules: the limit loaded" "$(rule_limit)" 2

# The ConfigMap changes: limit 2 becomes 5, the way kubelet swaps it.
write_config ..2026_01_01_00_01_00.000000002 5
ln -s ..2026_01_01_00_01_00.000000002 "$config/..data_tmp"
mv -T "$config/..data_tmp" "$config/..data"
rm -rf "$config/..2026_01_01_00_00_00.000000001"
limit_is_5() { [ "$(rule_limit)" = 5 ]; }
wait_for limit_is_5 \
  || fail "the swapped ConfigMap was not reloaded: /v1/rules shows limit '$(rule_limit)', want 5; logs: $("${podman[@]}" logs "$name" 2>&1 | tail -n 5)"
pass "the ..data swap reloaded the config: limit 5"
expect "POST /v1/check on the new limit" "$(check k2)" 200
grep -q '"limit":5' "$work/body" || fail "the check after the reload answered $(cat "$work/body"), want limit 5"

# SIGTERM: drain, exit 0.
"${podman[@]}" kill -s TERM "$name" >/dev/null
code="$(timeout 60 "${podman[@]}" wait "$name" || echo "did not exit")"
expect "exit code after SIGTERM" "$code" 0
logs="$("${podman[@]}" logs "$name" 2>&1)"
grep -q 'HTTP API: drained' <<<"$logs" || fail "no drain line after SIGTERM; logs: $logs"
grep -q 'tollgate serve: stopped' <<<"$logs" || fail "no stop line after SIGTERM; logs: $logs"
pass "SIGTERM drained the HTTP API and stopped"

# The image alone: its default command and config serve on all interfaces.
name="tollgate-test-default-$$"
port="$(free_port)"
base="http://127.0.0.1:$port"
run_server "$name" "$port" --
wait_for healthy \
  || fail "the image's default config never served /healthz; logs: $("${podman[@]}" logs "$name" 2>&1)"
expect "POST /v1/check on the default config" "$(curl_status "$base/v1/check" \
  -H 'content-type: application/json' -d '{"rule":"per_client_ip","key":"203.0.113.7"}')" 200
"${podman[@]}" stop -t 30 "$name" >/dev/null

# /bin/ratelimit, as Envoy Gateway runs it: uid 65534, read-only root,
# no arguments. Without Redis settings it refuses, naming the variable;
# with them it serves the reference's ports (Redis unreachable here:
# /healthcheck 500, /rlconfig 200).
out="$("${podman[@]}" run --rm "${limits[@]}" --read-only --read-only-tmpfs=false \
  --user 65534:65534 --entrypoint /bin/ratelimit "$image" 2>&1 || true)"
grep -q 'REDIS_SOCKET_TYPE' <<<"$out" || fail "/bin/ratelimit without Redis settings: $out"
pass "/bin/ratelimit refuses REDIS_SOCKET_TYPE=unix, naming it"
name="tollgate-test-ratelimit-$$"
port="$(free_port)"
debug_port="$(free_port)"
names+=("$name")
"${podman[@]}" run -d --name "$name" "${limits[@]}" --read-only --read-only-tmpfs=false \
  --user 65534:65534 --entrypoint /bin/ratelimit \
  -e REDIS_SOCKET_TYPE=tcp -e REDIS_URL=192.0.2.1:6379 -e USE_STATSD=false \
  -e RUNTIME_ROOT=/nonexistent -e CONFIG_TYPE=GRPC_XDS_SOTW -e FORCE_START_WITHOUT_INITIAL_CONFIG=true \
  -p "127.0.0.1:$port:8080" -p "127.0.0.1:$debug_port:6070" "$image" >/dev/null
rlconfig_answers() { [ "$(curl_status "http://127.0.0.1:$debug_port/rlconfig")" = 200 ]; }
wait_for rlconfig_answers \
  || fail "/bin/ratelimit never served /rlconfig; logs: $("${podman[@]}" logs "$name" 2>&1)"
expect "/bin/ratelimit GET /healthcheck with Redis unreachable" \
  "$(curl_status "http://127.0.0.1:$port/healthcheck")" 500
# huser prints the host's name for a uid it has one for (65534 is
# usually nobody): compare numbers.
huser="$("${podman[@]}" top "$name" huser | tail -n +2 | tr -d ' ')"
case "$huser" in
  *[!0-9]*) huser="$(id -u "$huser" 2>/dev/null || echo "$huser")" ;;
esac
expect "/bin/ratelimit's uid (podman top)" "$huser" "65534"
"${podman[@]}" stop -t 30 "$name" >/dev/null

expect "label org.opencontainers.image.version" \
  "$("${podman[@]}" image inspect "$image" --format '{{index .Labels "org.opencontainers.image.version"}}')" \
  "$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
expect "no shell in the image" \
  "$("${podman[@]}" run --rm "${limits[@]}" --entrypoint /bin/sh "$image" -c true >/dev/null 2>&1 && echo found || echo none)" none

# The systemd unit, against this image's binary.
bash deploy/systemd/test-unit.sh "$image"

echo "test-image.sh: all checks passed in $(("${SECONDS}" - started)) s"
