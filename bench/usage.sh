#!/usr/bin/env bash
# Usage operations next to a check, each measured against the check in the
# same run (issue 24's figures):
#   1. the memory store: ns per operation of check and charge, in turn for
#      15 rounds (bench/tools/usage_load.rs `memory`), and instructions per
#      operation counted by callgrind (`only KIND`, 400,000 operations less
#      an empty run), single and in the one-pair `*_all` form;
#   2. Redis: redis-server's CPU time (user + system, /proc) and script calls
#      (INFO commandstats; one call is one round trip here, as the client
#      sends one operation at a time) per check, charge, reserve+settle and
#      acquire+release, three rounds in turn; the ratios to a check;
#   3. with `http`, also bench/http-instructions.sh for check-open and
#      charge-open (POST /v1/check against POST /v1/charge).
# benchstat does the counting and the statistics (bench/lib/common.sh).
# Usage: bench/usage.sh [OPS=20000] [http]
set -euo pipefail
ops=${1:-20000}
source "$(dirname "$0")/lib/common.sh"
need_pkg valgrind valgrind
cargo build --release -q --features redis -p tollgate --example usage_load
bin=$target/release/examples/usage_load

echo "== memory store: ns per operation (median of 15 rounds, in turn)"
"$bin" memory 15 200000

echo "== memory store: instructions per operation (callgrind)"
# count KIND N: the instructions of `usage_load only KIND N`.
count() {
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1.$2" "$bin" only "$1" "$2" >/dev/null 2>&1
  benchstat callgrind "$work/cg.$1.$2"
}
ins="$work/instructions"
for kind in check charge check_all charge_all; do
  per=$(( ($(count "$kind" 400000) - $(count "$kind" 0)) / 400000 ))
  echo "$kind: $per instructions"
  benchstat put "$ins" "$kind" 1 "ins=$per"
done
benchstat ratios "$ins" --field ins --fmt 3 --title 'instructions' \
  --row 'charge / check' 'charge / check' - --row 'charge_all / check_all' 'charge_all / check_all' -

kinds=(check charge reserve-settle acquire-release)
echo "== Redis: redis-server CPU and script calls per operation ($ops each, 3 rounds in turn)"
start_redis
url="redis://127.0.0.1:$redis_port"
results="$work/redis-cpu"
for round in 1 2 3; do
  for kind in "${kinds[@]}"; do
    redis-cli -p "$redis_port" config resetstat >/dev/null
    benchstat run --results "$results" --id "$kind" --round "$round" --sut "$redis_pid" --count "$ops" -- \
      "$bin" redis "$url" "$kind" "$ops"
    read -r calls _ < <(script_calls "$redis_port")
    benchstat put "$results" "$kind" "$round" "calls=$calls"
  done
done
benchstat table "$results" --label operation --col 'redis-server us' srv 2 --range rounds srv 2 \
  --col 'script calls' 'calls / n' 2
benchstat ratios "$results" --field srv --title 'redis-server CPU, median of per-round ratios' \
  --row 'charge / check' 'charge / check' - --row 'reserve-settle / check' 'reserve-settle / check' - \
  --row 'acquire-release / check' 'acquire-release / check' -

echo "== Redis: redis-server instructions per operation (callgrind, the whole server, 2000 each)"
# The same operations with redis-server under callgrind: counters zeroed
# before each kind, dumped after; the count does not move with the load.
cg="$work/cg-redis"
mkdir -p "$cg"
cport=$(free_port)
valgrind --tool=callgrind --callgrind-out-file="$cg/cg.out" redis-server --port "$cport" \
  --bind 127.0.0.1 --save "" --appendonly no --dir "$cg" >/dev/null 2>"$cg/valgrind.log" &
cpid=$!
pids+=("$cpid")
for _ in $(seq 150); do redis-cli -p "$cport" ping >/dev/null 2>&1 && break; sleep 0.2; done
n=2000
"$bin" redis "redis://127.0.0.1:$cport" check 200 >/dev/null  # scripts loaded, connections warm
ins="$work/redis-instructions"
for kind in "${kinds[@]}"; do
  callgrind_control -z "$cpid" >/dev/null 2>&1
  "$bin" redis "redis://127.0.0.1:$cport" "$kind" "$n" >/dev/null
  rm -f "$cg"/cg.out.*
  callgrind_control -d "$cpid" >/dev/null 2>&1
  sleep 0.3
  benchstat put "$ins" "$kind" 1 "ins=$(benchstat callgrind --per "$n" "$cg"/cg.out.*)"
done
benchstat table "$ins" --label operation --col 'redis-server instructions' ins 0
benchstat ratios "$ins" --field ins --title 'redis-server instructions' \
  --row 'charge / check' 'charge / check' - --row 'reserve-settle / check' 'reserve-settle / check' - \
  --row 'acquire-release / check' 'acquire-release / check' -

if [[ "${2:-}" == http ]]; then
  echo "== HTTP API: instructions per request (bench/http-instructions.sh)"
  cargo build --release -q -p tollgate-server
  for kind in check-open charge-open check-open charge-open; do
    bash bench/http-instructions.sh "$kind" 3000 10000 8 "$target/release/tollgate" | tail -1
  done
fi
