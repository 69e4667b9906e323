#!/usr/bin/env bash
# Instructions per request of `tollgate serve` (user space, all threads),
# counted by callgrind: the machine is shared and noisy, and an instruction
# count does not move with the load, so this is how code changes to the
# front doors are judged (bench/http.sh gives the req/s and latencies).
#
# The server runs under valgrind; bench/http/load.py sends WARM requests
# (not counted), callgrind's counters are zeroed, then N requests are sent
# over CONNS keep-alive connections (one in flight each) and counted.
#
# Usage: bench/http-instructions.sh KIND [N=3000] [KEYS=10000] [CONNS=8] [BIN]
#   KIND: check-open | check-closed (the rules of bench/http/rules.toml,
#         POST /v1/check) | charge-open (POST /v1/charge of the open rule) | healthz | proxy (GET / through the proxy to
#         nginx, keyed by x-key among KEYS keys)
#   BIN:  the tollgate binary (default target/release/tollgate, built here;
#         target/profiling/tollgate, from `cargo build --profile profiling`,
#         has the line tables callgrind_annotate attributes lines with)
# Env:  STORE=redis: the checks go to a redis-server started here (its own
#       instructions are not counted: bench/lua-instructions.sh counts them)
set -euo pipefail
kind=${1:?usage: bench/http-instructions.sh KIND [N] [KEYS] [CONNS] [BIN]}
n=${2:-3000} keys=${3:-10000} conns=${4:-8} bin=${5:-}
warm=2000
source "$(dirname "$0")/lib/common.sh"
need_pkg valgrind valgrind
if [[ -z "$bin" ]]; then
  cargo build --release -q -p tollgate-server
  bin=$target/release/tollgate
fi
if [[ $kind == proxy ]]; then
  need_pkg nginx nginx-light
  port=$(free_port)
  mkdir -p "$work/nginx"
  sed -e "s|@DIR@|$work/nginx|g" -e "s|@PORT@|$port|g" bench/http/nginx.conf.in >"$work/nginx/nginx.conf"
  nginx -e "$work/nginx/error.log" -p "$work/nginx" -c "$work/nginx/nginx.conf" &
  pids+=($!)
  wait_http "http://127.0.0.1:$port/"
  args=(serve --config bench/http/proxy.toml --proxy 127.0.0.1:0 --upstream "http://127.0.0.1:$port")
  load=get
else
  args=(serve --config bench/http/rules.toml --http 127.0.0.1:0)
  load=$kind
fi
if [[ "${STORE:-memory}" == redis ]]; then
  start_redis
  args+=(--store "redis://127.0.0.1:$redis_port")
fi
BIN=valgrind start_tollgate callgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" "$bin" "${args[@]}"
python3 bench/http/load.py "$addr" "$warm" "$conns" "$load" "$keys" 2>/dev/null
callgrind_control -z "$pid" >/dev/null 2>&1
python3 bench/http/load.py "$addr" "$n" "$conns" "$load" "$keys"
callgrind_control -d "$pid" >/dev/null 2>&1
sleep 0.5
out="$work/cg.$pid.1"
ir=$(benchstat callgrind "$out")
echo "$kind: $(benchstat callgrind --per "$n" "$out") instructions per request ($ir over $n requests, $conns connections, $keys keys)"
