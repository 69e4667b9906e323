#!/usr/bin/env bash
# Redis store throughput and client CPU, measured in ONE run against ONE
# redis-server:
#   1. redis-benchmark running EVALSHA of tollgate's GCRA script, 64 clients
#      (and pipelined 16 deep), random keys;
#   2. tollgate's RedisStore doing GCRA checks, 64 concurrent tasks on a
#      current-thread tokio runtime in one process, over one pipelined
#      connection (concurrent checks batched into shared script runs)
#      (bench/tools/redis_load.rs): rps, latency p50/p99, and
#      the client's CPU per check (user + system, all threads);
#   3. redis-server's own cost per check in each run: its CPU time (user +
#      system, from /proc) over the run divided by the checks, and INFO
#      commandstats (script calls, usec_per_call, checks per call);
#   4. for scale, redis-benchmark's OWN client CPU per request when it
#      pipelines 64 deep on one connection -- the batching tollgate gets at
#      64 concurrent checks, so the kernel's share per request is the same.
# Prints the figures and the ratios. Usage: bench/redis.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-5}"
. bench/lib/redis.sh

cargo build --release -q --features redis -p tollgate --example redis_load
start_redis

s=crates/tollgate/src/store/redis/scripts
# the GCRA script as the store composes it for EVAL (see scripts.rs)
sha=$(redis-cli -p "$port" SCRIPT LOAD "$(echo 'local EVAL = true'; cat $s/prelude.lua $s/gcra.lua $s/check.lua
  echo 'return main(KEYS, ARGV)')")
# Same arguments tollgate sends for a cost-1 GCRA check of 1,000,000 per 1 s.
args=(EVALSHA "$sha" 1 "bench:{load:=__rand_int__}:gcra" "" 0 1 c 1 1 1 1000000 1 1000000)
n=$((secs * 60000))
rb() { redis-benchmark -p "$port" -r 10000 -n "$n" "$@" --csv "${args[@]}" | tail -1 | cut -d, -f2 | tr -d '"'; }
# redis-server's CPU time (user + system) in clock ticks.
ticks() { awk '{ print $14 + $15 }' "/proc/$redis_pid/stat"; }
# Script calls and their total µs from INFO commandstats (fcall + evalsha + eval).
calls() { redis-cli -p "$port" info commandstats | tr -d '\r' | awk -F'[=,:]' '
  /^cmdstat_(fcall|evalsha|eval):/ { c += $3; u += $5 } END { printf "%d %d\n", c, u }'; }
# Runs "$@", leaving in $redis_dir/cost redis-server's CPU µs over the run, and
# the script calls and their µs.
server_cost() {
  redis-cli -p "$port" config resetstat >/dev/null
  local t0; t0=$(ticks)
  "$@"
  local t1; t1=$(ticks)
  read -r c u < <(calls)
  echo "$(( (t1 - t0) * 1000000 / $(getconf CLK_TCK) )) $c $u" >"$redis_dir/cost"
}
server_line() { # label checks
  read -r cpu c u <"$redis_dir/cost"
  python3 -c 'import sys
label, cpu, c, u, items = sys.argv[1], *map(float, sys.argv[2:])
print(f"redis-server, {label}: {cpu/items:.2f} us CPU per check; {int(c)} script calls, "
      f"{items/max(c,1):.1f} checks per call, {u/max(c,1):.1f} us per call, {u/items:.2f} us per check in scripts")' "$1" "$cpu" "$c" "$u" "$2"
}
server_cost rb -c 64 >"$redis_dir/out"; plain=$(cat "$redis_dir/out")
srv_plain=$(server_line "redis-benchmark c=64" "$n")
server_cost rb -c 64 -P 16 >"$redis_dir/out"; piped=$(cat "$redis_dir/out")
srv_piped=$(server_line "redis-benchmark c=64 P=16" "$n")
server_cost target/release/examples/redis_load "redis://127.0.0.1:$port" 64 "$secs" 10000 >"$redis_dir/out"
ours=$(cat "$redis_dir/out")
srv_ours=$(server_line "tollgate c=64" "$(echo "$ours" | sed -E 's/.*checks=([0-9]+).*/\1/')")
ref=$( { TIMEFORMAT='%U %S'; time rb -c 1 -P 64 >/dev/null; } 2>&1 )
echo "redis-benchmark EVALSHA gcra c=64:        ${plain} req/s"
echo "redis-benchmark EVALSHA gcra c=64 P=16:   ${piped} req/s"
echo "$ours"
echo "$srv_plain"
echo "$srv_piped"
echo "$srv_ours"
rps=$(echo "$ours" | sed -E 's/.*rps=([0-9.]+).*/\1/')
python3 - "$rps" "$plain" "$piped" "$n" $ref <<'PY'
import sys
ours, plain, piped, n, user, system = map(float, sys.argv[1:])
print(f"redis-benchmark c=1 P=64 client CPU per request: {(user + system) * 1e6 / n:.2f} us")
print(f"ratio tollgate/redis-benchmark(c=64)      = {ours/plain:.2f}")
print(f"ratio tollgate/redis-benchmark(c=64,P=16) = {ours/piped:.2f}")
PY
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
