#!/usr/bin/env bash
# Holds a live `tollgate serve` to crates/tollgate-server/openapi.json:
# schemathesis fuzzes the HTTP API and the admin API (with a token) and
# fails on any answer the document does not allow (status, content type,
# body, declared headers), any 5xx, and any request over its timeout.
# scripts/test.sh runs it; docs/http-api.md#openapi says what it checks.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
SPEC=crates/tollgate-server/openapi.json
EXAMPLES="${API_FUZZ_EXAMPLES:-100}"

command -v schemathesis >/dev/null 2>&1 || {
  echo "api-fuzz: schemathesis is missing; install it with: python3 -m pip install schemathesis" >&2
  exit 1
}
# the binary as scripts/test.sh's `cargo test` built it (a plain `cargo
# build` resolves features without dev-dependencies: a second build)
cargo test -q -p tollgate-server --all-features --no-run
bin="${CARGO_TARGET_DIR:-target}/debug/tollgate"

work=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

token=$(python3 -c 'import secrets; print(secrets.token_hex(24))')

# port 0: each door binds a free port and logs it
TOLLGATE_ADMIN_TOKEN="$token" "$bin" serve --config scripts/api-fuzz/tollgate.toml \
  --http 127.0.0.1:0 --admin 127.0.0.1:0 >"$work/serve.log" 2>&1 &
server_pid=$!
addr_of() { sed -n "s|.*$1 listening on http://\([0-9.:]*\).*|\1|p" "$work/serve.log" | head -n 1; }
http="" admin=""
for _ in $(seq 1 400); do
  http=$(addr_of "HTTP API") admin=$(addr_of "admin API")
  [ -n "$http" ] && [ -n "$admin" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 0.05
done
if [ -z "$http" ] || [ -z "$admin" ]; then
  echo "api-fuzz: tollgate serve did not log both addresses within 20 s:" >&2
  cat "$work/serve.log" >&2
  exit 1
fi

# the served document is the committed one
curl -sf "http://$http/openapi.json" | cmp -s - "$SPEC" || {
  echo "api-fuzz: GET /openapi.json differs from $SPEC" >&2
  exit 1
}

fuzz() {
  # $1: base URL; the rest: schemathesis options. Run from the temp dir:
  # schemathesis keeps a cache (.schemathesis/) where it runs.
  local url=$1 root=$PWD
  shift
  (cd "$work" && schemathesis --config-file "$root/scripts/api-fuzz/schemathesis.toml" \
    run "$root/$SPEC" --url "$url" --checks all --max-examples "$EXAMPLES" \
    --request-timeout 5 --max-response-time 5 --seed 36 --no-color \
    --suppress-health-check all --warnings off "$@")
}
status=0
fuzz "http://$http" --exclude-path-regex '^/admin/' || status=1
fuzz "http://$admin" --include-path-regex '^/admin/' \
  -H "Authorization: Bearer $token" || status=1
if ! kill -0 "$server_pid" 2>/dev/null; then
  echo "api-fuzz: tollgate serve died during the run" >&2
  status=1
fi
if [ "$status" -ne 0 ]; then
  echo "api-fuzz: failed; serve's log:" >&2
  tail -n 40 "$work/serve.log" >&2
fi
exit "$status"
