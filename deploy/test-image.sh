#!/usr/bin/env bash
# Builds the container image (deploy/build-image.sh) and runs it with
# podman the way Kubernetes runs it: the config from a mounted directory
# laid out as a ConfigMap volume, a read-only root, a non-root user. Checks
# a decision and a 429, /healthz, the uid, a reload when the ConfigMap's
# `..data` symlink is swapped, and that SIGTERM drains and exits 0; then
# the image's own default config, and the systemd unit's command lines
# against the binary in the image (docs/container.md, docs/systemd.md).
#
#   deploy/test-image.sh [build-image.sh arguments]
#   TOLLGATE_IMAGE=localhost/tollgate:0.1.0 deploy/test-image.sh   # test a built image
#
# Every wait is bounded polling with a deadline; no check depends on how
# long anything takes. Containers and files are removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

# Podman on these machines: runc, cgroupfs and explicit ulimits
# (crun and the default ulimits are refused).
read -r -a podman <<<"podman ${PODMAN_GLOBAL_FLAGS---runtime runc --cgroup-manager=cgroupfs}"
read -r -a limits <<<"${PODMAN_RUN_ULIMITS---ulimit nofile=1024:1024 --ulimit nproc=1024:1024}"

started=$SECONDS
fail() {
  echo "test-image.sh: FAIL: $*" >&2
  exit 1
}
pass() { echo "test-image.sh: ok: $*"; }
# expect WHAT GOT WANT
expect() {
  [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
  pass "$1: $2"
}

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

# wait_for COMMAND...: runs COMMAND until it succeeds, for 60 s at most.
wait_for() {
  local deadline=$((SECONDS + 60))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

# run_server NAME HOST-PORT [podman run args...] -- [container args...]
run_server() {
  local name="$1" port="$2" opts=()
  shift 2
  while [ "$1" != "--" ]; do
    opts+=("$1")
    shift
  done
  shift
  names+=("$name")
  "${podman[@]}" run -d --name "$name" "${limits[@]}" --read-only \
    -p "127.0.0.1:$port:8080" "${opts[@]}" "$image" "$@" >/dev/null
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
  # [http] listen: until `serve` reads TOLLGATE_HTTP (the image's
  # default), the file names the all-interfaces address itself.
  cat >"$dir/tollgate.toml" <<EOF
[store]
url = "memory"

[http]
listen = "0.0.0.0:8080"

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
# OPS CHECK: once `serve --ops` exists (TOLLGATE_OPS=0.0.0.0:9090 in the
# image), publish 9090 in run_server and check /healthz and /readyz there.

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

expect "label org.opencontainers.image.version" \
  "$("${podman[@]}" image inspect "$image" --format '{{index .Labels "org.opencontainers.image.version"}}')" \
  "$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
expect "no shell in the image" \
  "$("${podman[@]}" run --rm "${limits[@]}" --entrypoint /bin/sh "$image" -c true >/dev/null 2>&1 && echo found || echo none)" none

# The systemd unit: its ExecStart is a command line `tollgate` accepts,
# and its config path holds a config `validate` accepts (the image's
# default config sits at the same /etc/tollgate/tollgate.toml).
unit=deploy/systemd/tollgate.service
exec_start="$(sed -n 's/^ExecStart=//p' "$unit")"
read -r -a argv <<<"$exec_start"
expect "the unit's binary" "${argv[0]}" /usr/local/bin/tollgate
expect "the unit's ExecStart parses (serve ... --help)" \
  "$("${podman[@]}" run --rm "${limits[@]}" "$image" "${argv[@]:1}" --help >/dev/null 2>&1 && echo yes || echo no)" yes
unit_config=""
for i in "${!argv[@]}"; do
  if [ "${argv[$i]}" = --config ]; then unit_config="${argv[$((i + 1))]}"; fi
done
expect "the unit's config path" "$unit_config" /etc/tollgate/tollgate.toml
expect "validate on the unit's config path" \
  "$("${podman[@]}" run --rm "${limits[@]}" "$image" validate --config "$unit_config" >/dev/null 2>&1 && echo valid || echo invalid)" valid
if command -v systemd-analyze >/dev/null 2>&1; then
  # `verify` also checks that every Exec binary exists; it runs on a root
  # holding the unit, the image's binary, kill and the host's system units.
  vroot="$work/verify-root"
  mkdir -p "$vroot/etc/systemd/system" "$vroot/usr/local/bin" "$vroot/usr/bin" "$vroot/usr/lib/systemd"
  ln -s usr/bin "$vroot/bin"
  mounted="$("${podman[@]}" image mount "$image")"
  cp "$mounted/usr/local/bin/tollgate" "$vroot/usr/local/bin/"
  "${podman[@]}" image unmount "$image" >/dev/null
  cp "$(type -P kill)" "$vroot/usr/bin/kill"
  cp -a /usr/lib/systemd/system "$vroot/usr/lib/systemd/"
  cp "$unit" "$vroot/etc/systemd/system/"
  # It prints every problem (an unknown key, a bad value) and still
  # exits 0: any output is a failure.
  verified="$(systemd-analyze verify --root="$vroot" tollgate.service 2>&1)" || true
  expect "systemd-analyze verify $unit (no output)" "$verified" ""
  # The hardening holds: systemd's exposure score (0 best, 10 worst; 1.2
  # when written) stays under 2.0.
  exposure="$(systemd-analyze security --offline=true --root="$vroot" tollgate.service 2>&1 \
    | sed -n 's/.*Overall exposure level for tollgate.service: \([0-9.]*\).*/\1/p')"
  python3 -c 'import sys; sys.exit(0 if float(sys.argv[1] or 99) < 2.0 else 1)' "$exposure" \
    || fail "systemd-analyze security: exposure '$exposure', want under 2.0"
  pass "systemd-analyze security: exposure $exposure"
else
  echo "test-image.sh: systemd-analyze missing: the unit is not verified"
fi

echo "test-image.sh: all checks passed in $(("${SECONDS}" - started)) s"
