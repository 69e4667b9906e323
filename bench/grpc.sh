#!/usr/bin/env bash
# The Envoy rate limit service under load: `tollgate serve --grpc` on the
# memory store and on a local redis-server (started here), driven by
# bench/tools/grpc_load.rs (CONCURRENCY callers over one
# HTTP/2 connection, as Envoy multiplexes its calls), for an admitted and a
# denied limit, one hot key and 10k keys. Prints one line per target.
#
# Usage: bench/grpc.sh [SECONDS per target, default 5] [CONCURRENCY, default 64]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-5}"
conc="${2:-64}"
[[ "$secs" =~ ^[0-9]+$ && "$conc" =~ ^[0-9]+$ ]] && ((secs >= 1 && secs <= 300 && conc >= 1 && conc <= 4096)) ||
  { echo "usage: bench/grpc.sh [SECONDS 1..300] [CONCURRENCY 1..4096]" >&2; exit 2; }
command -v redis-server >/dev/null || { echo "bench/grpc.sh: needs redis-server (apt-get install -y redis-server)" >&2; exit 1; }

cargo build --release -q -p tollgate-server --bin tollgate --example grpc_load
bin=target/release/tollgate
load=target/release/examples/grpc_load
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done

printf '[store]\ntimeout = "50ms"\non_error = "allow"\nprefix = "tollgate-grpc-bench"\n\n[[rules]]\nname = "unused"\nalgorithm = "gcra"\nlimit = 1\nperiod = "1s"\n' >"$work/t.toml"

echo "bench/grpc.sh: ${secs}s per target, $conc callers on one HTTP/2 connection; tollgate $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
for store in memory "redis://127.0.0.1:$rport"; do
  gport=$(free_port)
  "$bin" serve --config "$work/t.toml" --store "$store" --grpc "127.0.0.1:$gport" \
    --envoy-config bench/grpc/rls.yaml --envoy-config bench/grpc/rls-closed.yaml >"$work/tg.log" 2>&1 &
  tpid=$!
  pids+=($tpid)
  for _ in $(seq 100); do grep -q "listening on 127.0.0.1:$gport" "$work/tg.log" && break; sleep 0.1; done
  grep -q "listening on 127.0.0.1:$gport" "$work/tg.log" || { cat "$work/tg.log" >&2; exit 1; }
  name=${store%%:*}
  for domain in bench bench_closed; do
    for keys in 1 10000; do
      "$load" "127.0.0.1:$gport" "$conc" 1 "$keys" "$domain" >/dev/null # warm-up
      printf '%-6s %-12s keys %-6s ' "$name" "$domain" "$keys"
      "$load" "127.0.0.1:$gport" "$conc" "$secs" "$keys" "$domain"
    done
  done
  kill "$tpid"; wait "$tpid" 2>/dev/null || true
done
