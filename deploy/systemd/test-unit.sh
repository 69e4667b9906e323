#!/usr/bin/env bash
# Checks deploy/systemd/tollgate.service against the binary in a built
# image (docs/systemd.md): its command lines parse, `systemd-analyze`
# verifies it and rates its hardening, and it runs under a real systemd
# (booted in a privileged podman container on a Debian base): serves as an
# unprivileged user with no capability under its system-call filter,
# `systemctl reload` applies a valid config and refuses a bad one, and
# `systemctl stop` drains and exits 0. deploy/test-image.sh runs it.
#
#   deploy/systemd/test-unit.sh IMAGE
#
# The systemd run needs a Debian bookworm image with apt: the local
# builder base build-image.sh makes, else SYSTEMD_TEST_BASE, else
# docker.io/library/debian:bookworm when present; without one it is
# skipped and says so.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=deploy/test-lib.sh
. deploy/test-lib.sh

image="${1:?usage: deploy/systemd/test-unit.sh IMAGE}"
unit=deploy/systemd/tollgate.service
work="$(mktemp -d /tmp/tollgate-unit-test.XXXXXX)"
name="tollgate-unit-test-$$"
cleanup() {
  "${podman[@]}" rm -f -t 0 "$name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# ExecStart is a command line `tollgate` accepts (clap parses every flag
# before --help), and its config path holds a config `validate` accepts:
# the image's default config sits at the same /etc/tollgate/tollgate.toml.
read -r -a argv <<<"$(sed -n 's/^ExecStart=//p' "$unit")"
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
  echo "$me: systemd-analyze missing: the unit is not verified"
fi

# The unit under a real systemd.
base="${SYSTEMD_TEST_BASE:-}"
if [ -z "$base" ]; then
  base="$("${podman[@]}" images --format '{{.Repository}}:{{.Tag}}' \
    --filter reference=localhost/tollgate-base-builder | head -n 1)"
fi
if [ -z "$base" ] && "${podman[@]}" image exists docker.io/library/debian:bookworm; then
  base=docker.io/library/debian:bookworm
fi
if [ -z "$base" ]; then
  echo "$me: no Debian base image here: the unit is not run under systemd"
  exit 0
fi

ctx="$work/context"
mkdir -p "$ctx"
cp "$unit" "$ctx/"
write_config() {
  cat >"$1" <<EOF
[http]
listen = "127.0.0.1:8080"

[[rules]]
name = "per_key"
algorithm = "sliding_log"
limit = $2
period = "1h"
key = "header:x-key"
EOF
}
write_config "$ctx/tollgate.toml" 2
cat >"$ctx/Containerfile" <<EOF
FROM $base
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive \\
    apt-get install -y -qq --no-install-recommends systemd systemd-sysv procps curl >/dev/null \\
 && rm -rf /var/lib/apt/lists/*
COPY --from=$image /usr/local/bin/tollgate /usr/local/bin/tollgate
COPY tollgate.toml /etc/tollgate/tollgate.toml
COPY tollgate.service /etc/systemd/system/tollgate.service
RUN chmod 0644 /etc/tollgate/tollgate.toml && systemctl enable tollgate
CMD ["/sbin/init"]
EOF
probe="localhost/tollgate-unit-probe:latest"
# The apt layer is cached after the first run; build output only on failure.
if ! "${podman[@]}" build "${limits[@]}" --network host -t "$probe" "$ctx" >"$work/build.log" 2>&1; then
  cat "$work/build.log" >&2
  fail "could not build the systemd image on $base"
fi
# systemd as PID 1 sets up the unit's namespaces and filters: privileged.
"${podman[@]}" run -d --name "$name" --privileged --systemd=always "${limits[@]}" "$probe" >/dev/null
in_box() { "${podman[@]}" exec "$name" "$@"; }
journal() { in_box journalctl -u tollgate --no-pager 2>&1 | tail -n 40; }
healthy() { in_box curl -fsS -m 5 -o /dev/null http://127.0.0.1:8080/healthz 2>/dev/null; }
wait_for healthy || fail "tollgate.service never served /healthz; status: $(in_box systemctl status tollgate --no-pager 2>&1 | tail -n 15)"
pass "tollgate.service serves under systemd"

pid="$(in_box systemctl show -p MainPID --value tollgate)"
status="$(in_box cat "/proc/$pid/status")"
field() { sed -n "s/^$1:[[:space:]]*//p" <<<"$status" | awk '{print $1}'; }
uid="$(field Uid)"
if [ -z "$uid" ] || [ "$uid" = 0 ]; then
  fail "the service runs as uid '$uid', want a non-root one"
fi
pass "the service's uid: $uid (DynamicUser)"
expect "effective capabilities" "$(field CapEff)" 0000000000000000
expect "bounding capabilities" "$(field CapBnd)" 0000000000000000
expect "no_new_privs" "$(field NoNewPrivs)" 1
expect "seccomp mode (a filter)" "$(field Seccomp)" 2

check() {
  in_box curl -sS -m 5 -o /dev/null -w '%{http_code}' -H 'content-type: application/json' \
    -d '{"rule":"per_key","key":"k1"}' http://127.0.0.1:8080/v1/check || true
}
expect "POST /v1/check, 1st of 2" "$(check)" 200
expect "POST /v1/check, 2nd of 2" "$(check)" 200
expect "POST /v1/check, 3rd of 2" "$(check)" 429

rule_limit() {
  in_box curl -sS -m 5 http://127.0.0.1:8080/v1/rules 2>/dev/null \
    | sed -n 's/.*"name":"per_key","algorithm":"[a-z_]*","limit":\([0-9]*\).*/\1/p' || true
}
# A valid config renamed onto the path and `systemctl reload`: applied.
write_config "$work/new.toml" 5
"${podman[@]}" cp "$work/new.toml" "$name:/etc/tollgate/tollgate.toml.new"
in_box chmod 0644 /etc/tollgate/tollgate.toml.new
in_box mv /etc/tollgate/tollgate.toml.new /etc/tollgate/tollgate.toml
in_box systemctl reload tollgate || fail "systemctl reload of a valid config failed; journal: $(journal)"
limit_is_5() { [ "$(rule_limit)" = 5 ]; }
wait_for limit_is_5 || fail "after systemctl reload /v1/rules shows limit '$(rule_limit)', want 5; journal: $(journal)"
pass "systemctl reload applied the new config: limit 5"
# A bad one: the reload fails (validate, first) and the old rules serve.
in_box sh -c 'echo "bogus = 1" >>/etc/tollgate/tollgate.toml'
if in_box systemctl reload tollgate >/dev/null 2>&1; then
  fail "systemctl reload of an invalid config succeeded; journal: $(journal)"
fi
journal | grep -q 'unknown field' || fail "the failed reload's journal does not name the problem: $(journal)"
pass "systemctl reload of an invalid config failed, naming it"
expect "the rules serving after the failed reload: limit" "$(rule_limit)" 5

in_box systemctl stop tollgate
expect "the service's exit status after systemctl stop" \
  "$(in_box systemctl show -p ExecMainStatus --value tollgate)" 0
expect "the service's result" "$(in_box systemctl show -p Result --value tollgate)" success
journal | grep -q 'HTTP API: drained' || fail "no drain line in the journal: $(journal)"
pass "systemctl stop drained the HTTP API"
