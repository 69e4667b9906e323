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
# Prints the figures and the ratios (benchstat: bench/lib/common.sh).
# Usage: bench/redis.sh [seconds]
set -euo pipefail
secs="${1:-5}"
source "$(dirname "$0")/lib/common.sh"
need_pkg redis-benchmark redis-tools

cargo build --release -q --features redis -p tollgate --example redis_load
start_redis

s=crates/tollgate/src/store/redis/scripts
# the GCRA script as the store composes it for EVAL (see scripts.rs)
sha=$(redis-cli -p "$redis_port" SCRIPT LOAD "$(echo 'local EVAL = true'; cat $s/prelude.lua $s/gcra.lua $s/check.lua
  echo 'return main(KEYS, ARGV)')")
# Same arguments tollgate sends for a cost-1 GCRA check of 1,000,000 per 1 s.
args=(EVALSHA "$sha" 1 "bench:{load:=__rand_int__}:gcra" "" 0 1 c 1 1 1 1000000 1 1000000)
n=$((secs * 60000))
results="$work/results"
# run ID LABEL COUNT PARSE COMMAND...: one run, with redis-server's CPU
# ("srv") and its script calls and their µs (INFO commandstats) over it.
run() {
  local id=$1 label=$2 count=$3 parse=$4 calls usec; shift 4
  redis-cli -p "$redis_port" config resetstat >/dev/null
  benchstat run --results "$results" --id "$id" --round 1 --label "$label" --sut "$redis_pid" \
    --count "$count" --parse "$parse" --out "$work/$id.out" -- "$@"
  read -r calls usec < <(script_calls "$redis_port")
  benchstat put "$results" "$id" 1 "calls=$calls" "usec=$usec"
}
rb=(redis-benchmark -p "$redis_port" -r 10000 -n "$n" --csv)
run rb 'redis-benchmark EVALSHA gcra c=64' "$n" redis-benchmark "${rb[@]}" -c 64 "${args[@]}"
run piped 'redis-benchmark EVALSHA gcra c=64 P=16' "$n" redis-benchmark "${rb[@]}" -c 64 -P 16 "${args[@]}"
run ours 'tollgate RedisStore c=64' checks kv "$target/release/examples/redis_load" "redis://127.0.0.1:$redis_port" 64 "$secs" 10000
# for scale: redis-benchmark's own client CPU when it pipelines 64 deep on
# one connection, the batching tollgate gets at 64 concurrent checks
run ref 'redis-benchmark EVALSHA gcra c=1 P=64' "$n" redis-benchmark "${rb[@]}" -c 1 -P 64 "${args[@]}"

cat "$work/ours.out"
benchstat table "$results" --label 'one run' --col 'checks/s' rps 0 --col 'client us/check' load 2 \
  --col 'redis-server us/check' srv 2 --col 'script calls' calls 0 --col 'checks/call' 'n / calls' 1 \
  --col 'us/call' 'usec / calls' 1 --col 'us/check in scripts' 'usec / n' 2
echo
benchstat ratios "$results" --title 'checks/s' --row 'tollgate / redis-benchmark c=64' 'ours / rb' - \
  --row 'tollgate / redis-benchmark c=64 P=16' 'ours / piped' -
echo "client us/check: CPU of the load tool (utime + stime, /proc), per check; redis-server us/check: its own."
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
