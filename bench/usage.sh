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
# Usage: bench/usage.sh [OPS=20000] [http]
set -euo pipefail
cd "$(dirname "$0")/.."
ops=${1:-20000}
. bench/lib/redis.sh
command -v valgrind >/dev/null || { echo "install: apt-get install -y valgrind" >&2; exit 1; }
cargo build --release -q --features redis -p tollgate --example usage_load
bin=target/release/examples/usage_load

echo "== memory store: ns per operation (median of 15 rounds, in turn)"
"$bin" memory 15 200000

echo "== memory store: instructions per operation (callgrind)"
count() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" only "$1" "$2" 2>&1 | awk '/Collected/ { print $4 }'; }
declare -A per
for kind in check charge check_all charge_all; do
  full=$(count "$kind" 400000); empty=$(count "$kind" 0)
  per[$kind]=$(( (full - empty) / 400000 ))
  echo "$kind: ${per[$kind]} instructions"
done
awk -v a="${per[charge]}" -v b="${per[check]}" -v c="${per[charge_all]}" -v d="${per[check_all]}" \
  'BEGIN { printf "charge/check %.3f, charge_all/check_all %.3f\n", a / b, c / d }'

echo "== Redis: redis-server CPU and script calls per operation ($ops each, 3 rounds in turn)"
start_redis
url="redis://127.0.0.1:$port"
ticks() { awk '{ print $14 + $15 }' "/proc/$redis_pid/stat"; }
calls() { redis-cli -p "$port" info commandstats | tr -d '\r' | awk -F'[=,:]' '
  /^cmdstat_(evalsha|eval):/ { c += $3 } END { printf "%d\n", c }'; }
hz=$(getconf CLK_TCK)
declare -A cpu rt
for round in 1 2 3; do
  for kind in check charge reserve-settle acquire-release; do
    redis-cli -p "$port" config resetstat >/dev/null
    before=$(ticks)
    "$bin" redis "$url" "$kind" "$ops" >/dev/null
    after=$(ticks)
    us=$(( (after - before) * 1000000 / hz ))
    cpu[$kind]="${cpu[$kind]:-} $(awk -v u="$us" -v n="$ops" 'BEGIN { printf "%.2f", u / n }')"
    rt[$kind]=$(awk -v c="$(calls)" -v n="$ops" 'BEGIN { printf "%.2f", c / n }')
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
check=$(echo "${cpu[check]}" | median)
for kind in check charge reserve-settle acquire-release; do
  m=$(echo "${cpu[$kind]}" | median)
  awk -v k="$kind" -v m="$m" -v c="$check" -v r="${rt[$kind]}" -v all="${cpu[$kind]}" \
    'BEGIN { printf "%-16s %6.2f us of redis-server CPU (rounds:%s), %s script calls, %.2fx a check\n", k, m, all, r, m / c }'
done

echo "== Redis: redis-server instructions per operation (callgrind, the whole server, 2000 each)"
# The same operations with redis-server under callgrind: counters zeroed
# before each kind, dumped after; the count does not move with the load.
cg=$(mktemp -d)
cport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$cg/cg.out" redis-server --port "$cport" \
  --bind 127.0.0.1 --save "" --appendonly no --dir "$cg" >/dev/null 2>"$cg/valgrind.log" &
cpid=$!
trap 'kill $cpid 2>/dev/null; kill $redis_pid 2>/dev/null; rm -rf "$cg" "$redis_dir"' EXIT
for _ in $(seq 150); do redis-cli -p "$cport" ping >/dev/null 2>&1 && break; sleep 0.2; done
n=2000
"$bin" redis "redis://127.0.0.1:$cport" check 200 >/dev/null  # scripts loaded, connections warm
declare -A ins
for kind in check charge reserve-settle acquire-release; do
  callgrind_control -z "$cpid" >/dev/null 2>&1
  "$bin" redis "redis://127.0.0.1:$cport" "$kind" "$n" >/dev/null
  rm -f "$cg"/cg.out.*
  callgrind_control -d "$cpid" >/dev/null 2>&1
  sleep 0.3
  total=$(grep -h '^summary:' "$cg"/cg.out.* | awk '{ s += $2 } END { print s }')
  ins[$kind]=$(( total / n ))
done
for kind in check charge reserve-settle acquire-release; do
  awk -v k="$kind" -v i="${ins[$kind]}" -v c="${ins[check]}" \
    'BEGIN { printf "%-16s %8d instructions of redis-server, %.2fx a check\n", k, i, i / c }'
done

if [[ "${2:-}" == http ]]; then
  echo "== HTTP API: instructions per request (bench/http-instructions.sh)"
  cargo build --release -q -p tollgate-server
  for kind in check-open charge-open check-open charge-open; do
    bash bench/http-instructions.sh "$kind" 3000 10000 8 "$PWD/target/release/tollgate" | tail -1
  done
fi
