#!/usr/bin/env bash
# The hybrid store vs the plain Redis store vs the memory store, in ONE run
# against ONE redis-server started here (bench/tools/hybrid_bench.rs):
#   1. latency p50/p99 of one check, one sequential caller: memory, Redis,
#      hybrid, and what Redis adds over memory;
#   2. checks/s at 64 concurrent tasks (1 worker thread) and Redis calls per
#      check, plain Redis vs hybrid, all-admitted and over-the-limit workloads;
#   3. a fleet of 5 hybrid stores at 10x the demand a 1,000/s limit allows
#      (gcra, token bucket, fixed window): Redis calls per check, accuracy.
# Then checks the stores' call counts against the server's own count of
# script calls (INFO commandstats). Usage: bench/hybrid.sh [seconds per phase]
set -euo pipefail
secs="${1:-3}"
source "$(dirname "$0")/lib/common.sh"

cargo build --release -q --features redis -p tollgate --example hybrid_bench
start_redis

out=$("$target/release/examples/hybrid_bench" "redis://127.0.0.1:$redis_port" "$secs")
echo "$out" | grep -v '^TOTAL'
total=$(echo "$out" | grep '^TOTAL')
field() { grep -o "$1=[0-9]*" <<<"$total" | cut -d= -f2; }
read -r server_calls _ < <(script_calls "$redis_port")
echo "Redis requests: the stores counted $(($(field redis_checks) + $(field hybrid_calls))) (a plain check is one request, a hybrid" \
  "lease one); redis-server counted $server_calls script runs: concurrent plain checks" \
  "share one run (batches of up to 64), and a script's first use adds a NOSCRIPT retry"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
