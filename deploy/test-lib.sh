# shellcheck shell=bash
# What deploy/test-image.sh and deploy/systemd/test-unit.sh share: podman
# as these machines need it, checks that print what they saw, and bounded
# waits. Sourced, not run.

# Podman here: runc, cgroupfs and explicit ulimits (crun and the default
# ulimits are refused). Empty the variables elsewhere.
# shellcheck disable=SC2034 # used by the scripts that source this file
read -r -a podman <<<"podman ${PODMAN_GLOBAL_FLAGS---runtime runc --cgroup-manager=cgroupfs}"
# shellcheck disable=SC2034 # used by the scripts that source this file
read -r -a limits <<<"${PODMAN_RUN_ULIMITS---ulimit nofile=1024:1024 --ulimit nproc=1024:1024}"

# The calling script's name, for its messages.
me="$(basename "$0")"

fail() {
  echo "$me: FAIL: $*" >&2
  exit 1
}
pass() { echo "$me: ok: $*"; }
# expect WHAT GOT WANT
expect() {
  [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
  pass "$1: $2"
}

# wait_for COMMAND...: runs COMMAND until it succeeds, for 60 s at most.
wait_for() {
  local deadline=$((SECONDS + 60))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}
