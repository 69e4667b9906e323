#!/usr/bin/env bash
# Redis store throughput and client CPU, measured in ONE run against ONE
# redis-server:
#   1. redis-benchmark running EVALSHA of tollgate's GCRA script, 64 clients
#      (and pipelined 16 deep), random keys;
#   2. tollgate's RedisStore doing GCRA checks, 64 concurrent tasks on a
#      1-worker tokio runtime in one process, over one pipelined connection
#      (crates/tollgate/examples/redis_load.rs): rps, latency p50/p99, and
#      the client's CPU per check (user + system, all threads);
#   3. for scale, redis-benchmark's OWN client CPU per request when it
#      pipelines 64 deep on one connection -- the batching tollgate gets at
#      64 concurrent checks, so the kernel's share per request is the same.
# Prints the figures and the ratios. Usage: bench/redis.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-5}"
command -v redis-server >/dev/null || { echo "install: apt-get install -y redis-server redis-tools" >&2; exit 1; }

cargo build --release -q --features redis -p tollgate --example redis_load
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
  --daemonize no --logfile "$dir/log" &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

s=crates/tollgate/src/store/redis/scripts
sha=$(redis-cli -p "$port" SCRIPT LOAD "$(cat $s/prelude.lua $s/gcra.lua $s/check.lua)")
# Same arguments tollgate sends for a cost-1 GCRA check of 1,000,000 per 1 s.
args=(EVALSHA "$sha" 1 "bench:{load:=__rand_int__}:gcra" "" 0 1 c 1 1 1 1000000 1 1000000)
n=$((secs * 60000))
rb() { redis-benchmark -p "$port" -r 10000 -n "$n" "$@" --csv "${args[@]}" | tail -1 | cut -d, -f2 | tr -d '"'; }
plain=$(rb -c 64)
piped=$(rb -c 64 -P 16)
ours=$(target/release/examples/redis_load "redis://127.0.0.1:$port" 64 "$secs" 10000)
ref=$( { TIMEFORMAT='%U %S'; time rb -c 1 -P 64 >/dev/null; } 2>&1 )
echo "redis-benchmark EVALSHA gcra c=64:        ${plain} req/s"
echo "redis-benchmark EVALSHA gcra c=64 P=16:   ${piped} req/s"
echo "$ours"
rps=$(echo "$ours" | sed -E 's/.*rps=([0-9.]+).*/\1/')
python3 - "$rps" "$plain" "$piped" "$n" $ref <<'PY'
import sys
ours, plain, piped, n, user, system = map(float, sys.argv[1:])
print(f"redis-benchmark c=1 P=64 client CPU per request: {(user + system) * 1e6 / n:.2f} us")
print(f"ratio tollgate/redis-benchmark(c=64)      = {ours/plain:.2f}")
print(f"ratio tollgate/redis-benchmark(c=64,P=16) = {ours/piped:.2f}")
PY
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
