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
cd "$(dirname "$0")/.."
secs="${1:-3}"
. bench/lib/redis.sh

cargo build --release -q --features redis -p tollgate --example hybrid_bench
start_redis

out=$(target/release/examples/hybrid_bench "redis://127.0.0.1:$port" "$secs")
echo "$out" | grep -v '^TOTAL'
total=$(echo "$out" | grep '^TOTAL')
server_calls=$(redis-cli -p "$port" INFO commandstats | tr -d '\r' \
  | sed -nE 's/^cmdstat_eval(sha)?:calls=([0-9]+),.*/\2/p' | paste -sd+ | bc)
python3 - "$total" "$server_calls" <<'PY'
import sys
fields = dict(kv.split("=") for kv in sys.argv[1].split()[1:])
ours = int(fields["redis_checks"]) + int(fields["hybrid_calls"])
print(f"Redis requests: the stores counted {ours} (a plain check is one request, a hybrid "
      f"lease one); redis-server counted {sys.argv[2]} script runs: concurrent plain checks "
      "share one run (batches of up to 64), and a script's first use adds a NOSCRIPT retry")
PY
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
