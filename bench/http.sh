#!/usr/bin/env bash
# The front doors under load, measured in ONE run on this machine with wrk
# (2 threads, 64 connections, N seconds per target; wrk shares the machine's
# 2 cores with the server, as in the issue's reference figures):
#
#   1. tollgate's no-op endpoint, GET /healthz: the HTTP ceiling
#      (and throttlecrab's GET /health, its own);
#   2. POST /v1/check on the memory store;
#   3. POST /v1/check on a local redis-server (started here);
#   4. throttlecrab-server 0.4 (its own memory store), POST /throttle with
#      the same limits;
#      each of 2-4 with an admitted rule ("open") and a denied one
#      ("closed"), one hot key and 10k random keys (bench/http/*.lua);
#   5. the reverse proxy in front of nginx (`return 200 "ok"`) against nginx
#      directly, at 64 connections and at 1 (the proxy's own latency,
#      without queueing);
#      and nginx itself as the same kind of proxy (bench/http/
#      nginx-proxy.conf.in: limit_req keyed by x-key, keep-alive upstream
#      pool), the peer for the proxy's figures;
#   5b. the same three (nginx direct, tollgate's proxy, nginx's proxy) at a
#      FIXED request rate (oha -q RATE, 64 connections, latency corrected
#      for coordinated omission): the latency a proxy adds at equal offered
#      load. At 64 closed-loop connections wrk sends as fast as the slowest
#      part answers, so there a proxy's p99 is mostly its throughput
#      (queueing: 64 / req/s), not the time it adds to a request;
#   6. the HTTP ceiling of a check (bench/tools/http_ceiling.rs): POST
#      /v1/check on tollgate's own connection handling, the body read as the API reads it, every request answered
#      with the constant bytes of an admitted check (no parsing, no
#      decision): what a check costs over HTTP/1.1 before it does anything.
#
# Prints one table (req/s, p50, p99 per target, plus the CPU the server
# spent per request and the share of the machine other processes took
# meanwhile: the machine is shared, and that column says how noisy a row
# is) and the ratios the issue's goals are about. With ROUNDS > 1 the whole
# set is measured ROUNDS times, interleaved, and each target's best round
# (highest req/s) is reported, with the spread; the ratios are then also
# given as the median over rounds of each round's own ratio (both sides
# measured minutes apart in the same round), which the machine's swings
# move less than a ratio of two best rounds. benchstat does the counting
# and the statistics (bench/lib/common.sh).
#
# Everything listens on 127.0.0.1; every process started here is stopped on
# exit; each wrk run is bounded by a timeout.
#
# Usage: bench/http.sh [SECONDS per target, default 10] [ROUNDS, default 1]
# Env:   BENCH_KEEP=DIR keeps wrk's raw output and the servers' logs in DIR;
#        BENCH_QUIET_BUSY=25 / BENCH_QUIET_WAIT=60: before each run, wait (at
#        most WAIT s) until the machine is under BUSY % busy;
#        BENCH_RATE=2000: the fixed request rate of 5b (requests/s).
set -euo pipefail
secs="${1:-10}"
rounds="${2:-1}"
[[ "$secs" =~ ^[0-9]+$ && "$rounds" =~ ^[0-9]+$ ]] && ((secs >= 1 && secs <= 300 && rounds >= 1 && rounds <= 10)) ||
  { echo "usage: bench/http.sh [SECONDS per target, 1..300] [ROUNDS, 1..10]" >&2; exit 2; }
threads=2
conns=64
keys=10000

# log, die, need_pkg, need_oha, stop, free_port, wait_http,
# start_tollgate, start_redis, measure (wrk), measure_rate (oha),
# benchstat: shared with the other scripts.
source "$(dirname "$0")/lib/common.sh"
need_pkg wrk wrk
need_pkg nginx nginx-light
need_pkg ss iproute2
need_pkg curl curl

tools="$target/bench-tools"
tc_bin="$tools/bin/throttlecrab-server"
if [[ ! -x "$tc_bin" ]]; then
  need_pkg protoc protobuf-compiler # throttlecrab-server's build compiles its gRPC protos
  log "installing throttlecrab-server 0.4 into $tools (cargo install)"
  cargo install -q --locked --root "$tools" throttlecrab-server --version '^0.4'
fi
tc_version=$("$tc_bin" --version 2>/dev/null | head -1 || true)
need_oha
rate="${BENCH_RATE:-2000}"
[[ "$rate" =~ ^[0-9]+$ ]] && ((rate >= 1 && rate <= 1000000)) || die "BENCH_RATE must be 1..1000000 requests/s"

log "building tollgate (release)"
cargo build --release -q -p tollgate-server --bin tollgate --example http_ceiling
tollgate="$target/release/tollgate"
ceiling="$target/release/examples/http_ceiling"

results="$work/results"
round=0
sut=() # the server under test, with its children (its CPU is the "srv" column)
aux=() # what it leans on: redis-server, the proxy's upstream ("aux" column)

# expect WHAT GOT WANT: a sanity check of one answer before a target is loaded.
expect() { [[ "$2" == *"$3"* ]] || die "$1: expected $3, got: $2"; }
post_json() { curl -s --max-time 2 -H 'content-type: application/json' -d "$2" "$1"; }

# The 2x2 check workload: admitted/denied rule x one hot key/10k keys.
check_matrix() { # ID-PREFIX NAME URL FORMAT
  local rule k
  for rule in open closed; do
    for k in 1 "$keys"; do
      measure "$1.$rule.$k" "$2 $rule $( ((k == 1)) && echo 'hot key' || echo "${k} keys")" \
        "$3" check.lua "$conns" -- "$4" "$rule" "$k"
    done
  done
}

# Tollgate's /metrics: checks by rule and outcome (what was decided).
tollgate_outcomes() { # ADDR NAME
  curl -s --max-time 2 "http://$1/metrics" | grep '^tollgate_checks_total' >"$work/outcomes-$2.txt" || true
}

one_round() {
  local tg tc_pid tc_port ng_pid ng_port proxy_pid proxy_addr
  # 1-2. tollgate's HTTP API on the memory store, and its /healthz.
  start_tollgate api-memory --config bench/http/rules.toml --http 127.0.0.1:0 --store memory
  tg=$pid sut=("$pid") aux=()
  wait_http "http://$addr/healthz"
  expect "memory open" "$(post_json "http://$addr/v1/check" '{"rule":"open","key":"probe"}')" '"allowed":true'
  for _ in 1 2; do post_json "http://$addr/v1/check" '{"rule":"closed","key":"probe"}' >/dev/null; done
  expect "memory closed" "$(post_json "http://$addr/v1/check" '{"rule":"closed","key":"probe"}')" '"allowed":false'
  measure healthz "tollgate GET /healthz" "http://$addr" get.lua "$conns" -- /healthz
  check_matrix mem "tollgate memory" "http://$addr" tollgate
  tollgate_outcomes "$addr" memory
  local fresh
  fresh=$(post_json "http://$addr/v1/check" '{"rule":"open","key":"ceiling-probe"}')
  stop "$tg"

  # 6. The HTTP ceiling: a constant admitted-check answer, byte for byte
  # what tollgate just answered for a fresh key of the same rule.
  BIN="$ceiling" start_tollgate ceiling 127.0.0.1:0
  tg=$pid sut=("$pid") aux=()
  expect "ceiling answer" "$(post_json "http://$addr/v1/check" '{"rule":"open","key":"probe"}')" "$fresh"
  measure ceiling "ceiling: constant check answer" "http://$addr" check.lua "$conns" -- tollgate open "$keys"
  stop "$tg"

  # 3. tollgate's HTTP API on a local Redis.
  start_redis
  start_tollgate api-redis --config bench/http/rules.toml --http 127.0.0.1:0 \
    --store "redis://127.0.0.1:$redis_port"
  tg=$pid sut=("$pid") aux=("$redis_pid")
  wait_http "http://$addr/readyz"
  expect "redis open" "$(post_json "http://$addr/v1/check" '{"rule":"open","key":"probe"}')" '"allowed":true'
  for _ in 1 2; do post_json "http://$addr/v1/check" '{"rule":"closed","key":"probe"}' >/dev/null; done
  expect "redis closed" "$(post_json "http://$addr/v1/check" '{"rule":"closed","key":"probe"}')" '"allowed":false'
  redis-cli -p "$redis_port" config resetstat >/dev/null
  check_matrix redis "tollgate redis" "http://$addr" tollgate
  tollgate_outcomes "$addr" redis
  # Where redis-server's time goes: the script's cost per call vs its own
  # commands (usec_per_call is measured inside redis-server).
  redis-cli -p "$redis_port" info commandstats |
    grep -E '^cmdstat_(evalsha|fcall|time|get|set|hmget|hset|pexpire):' |
    sed -E 's/^cmdstat_([a-z]+):calls=([0-9]+),usec=[0-9]+,usec_per_call=([0-9.]+).*/\1 \3 us x \2/' \
    >"$work/redis-commandstats.txt" || true
  if grep -q 'store trouble' "$work/api-redis.log"; then log "WARNING: tollgate logged store trouble with Redis"; fi
  stop "$tg"
  stop "$redis_pid"

  # 4. throttlecrab-server: its HTTP transport only, default store.
  tc_port=$(free_port)
  "$tc_bin" --http --http-host 127.0.0.1 --http-port "$tc_port" --log-level warn \
    >"$work/throttlecrab.log" 2>&1 &
  tc_pid=$!
  pids+=("$tc_pid")
  sut=("$tc_pid") aux=()
  wait_http "http://127.0.0.1:$tc_port/health"
  local tcu="http://127.0.0.1:$tc_port/throttle"
  expect "throttlecrab open" "$(post_json "$tcu" '{"key":"open:probe","max_burst":1000000,"count_per_period":1000000,"period":1}')" '"allowed":true'
  for _ in 1 2; do post_json "$tcu" '{"key":"closed:probe","max_burst":2,"count_per_period":1,"period":86400}' >/dev/null; done
  expect "throttlecrab closed" "$(post_json "$tcu" '{"key":"closed:probe","max_burst":2,"count_per_period":1,"period":86400}')" '"allowed":false'
  measure tc_health "throttlecrab GET /health" "http://127.0.0.1:$tc_port" get.lua "$conns" -- /health
  # throttlecrab answers 200 to denied checks too; its metrics tell.
  check_matrix tc "throttlecrab" "http://127.0.0.1:$tc_port" throttlecrab
  curl -s --max-time 2 "http://127.0.0.1:$tc_port/metrics" |
    grep -E '^throttlecrab_requests_(allowed|denied|errors)' >"$work/outcomes-throttlecrab.txt" || true
  stop "$tc_pid"

  # 5. The reverse proxy in front of nginx, and nginx directly.
  ng_port=$(free_port)
  mkdir -p "$work/nginx"
  sed -e "s|@DIR@|$work/nginx|g" -e "s|@PORT@|$ng_port|g" bench/http/nginx.conf.in >"$work/nginx/nginx.conf"
  nginx -e "$work/nginx/nginx-error.log" -p "$work/nginx" -c "$work/nginx/nginx.conf" &
  ng_pid=$!
  pids+=("$ng_pid")
  wait_http "http://127.0.0.1:$ng_port/"
  start_tollgate proxy --config bench/http/proxy.toml --proxy 127.0.0.1:0 \
    --upstream "http://127.0.0.1:$ng_port"
  proxy_pid=$pid proxy_addr=$addr
  wait_http "http://$proxy_addr/"
  expect "proxy headers" "$(curl -si --max-time 2 -H 'x-key: probe' "http://$proxy_addr/")" 'ratelimit-policy'
  # nginx as the same kind of proxy (rate limited by x-key, pooled
  # keep-alive upstream connections), in front of the same nginx.
  local np_port np_pid
  np_port=$(free_port)
  mkdir -p "$work/nginx-proxy"
  sed -e "s|@DIR@|$work/nginx-proxy|g" -e "s|@PORT@|$np_port|g" -e "s|@UPSTREAM@|$ng_port|g" \
    bench/http/nginx-proxy.conf.in >"$work/nginx-proxy/nginx.conf"
  nginx -e "$work/nginx-proxy/nginx-error.log" -p "$work/nginx-proxy" -c "$work/nginx-proxy/nginx.conf" &
  np_pid=$!
  pids+=("$np_pid")
  wait_http "http://127.0.0.1:$np_port/"
  # (nginx's workers are its children: counted with it)
  sut=("$ng_pid") aux=()
  measure direct "nginx direct (c=$conns)" "http://127.0.0.1:$ng_port" get.lua "$conns" -- / "$keys"
  measure direct1 "nginx direct (c=1)" "http://127.0.0.1:$ng_port" get.lua 1 -- / "$keys"
  measure_rate directr "nginx direct ($rate/s)" "http://127.0.0.1:$ng_port/"
  sut=("$proxy_pid") aux=("$ng_pid")
  measure proxy "proxy -> nginx (c=$conns)" "http://$proxy_addr" get.lua "$conns" -- / "$keys"
  measure proxy1 "proxy -> nginx (c=1)" "http://$proxy_addr" get.lua 1 -- / "$keys"
  measure_rate proxyr "proxy -> nginx ($rate/s)" "http://$proxy_addr/"
  sut=("$np_pid") aux=("$ng_pid")
  measure nproxy "nginx proxy -> nginx (c=$conns)" "http://127.0.0.1:$np_port" get.lua "$conns" -- / "$keys"
  measure nproxy1 "nginx proxy -> nginx (c=1)" "http://127.0.0.1:$np_port" get.lua 1 -- / "$keys"
  measure_rate nproxyr "nginx proxy -> nginx ($rate/s)" "http://127.0.0.1:$np_port/"
  stop "$np_pid"
  stop "$proxy_pid"
  stop "$ng_pid"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((round = 1; round <= rounds; round++)); do one_round; done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# --- report: each target's best round (highest req/s; fixed-rate rows: lowest p99)
echo
echo "bench/http.sh $secs $rounds: wrk -t$threads -c$conns -d${secs}s --latency per target, $rounds round(s)$( ((rounds > 1)) && echo ', best round per target'); $(nproc) cores shared by wrk and the server"
echo "tollgate $(tree); ${tc_version:-throttlecrab-server}; redis $(redis-server --version | grep -o 'v=[0-9.]*' | cut -d= -f2); nginx $(nginx -v 2>&1 | grep -o '[0-9.]*$'); load average before $load_before, after $load_after"
echo
spread=()
((rounds > 1)) && spread=(--range 'req/s min..max' rps 0)
benchstat table "$results" --of best --col 'req/s' rps 0 --col 'p50 ms' p50 3 --col 'p99 ms' p99 3 \
  --col non2xx non2xx 1% --col 'srv us/r' srv 2 --col 'aux us/r' aux 2 --col 'wrk us/r' load 2 \
  --col other other 0% --col steal steal 0% "${spread[@]}" --col 'socket errors' errors 0
cat <<'EOF'

non2xx: tollgate answers 429 to a denied check, throttlecrab 200 with "allowed":false.
(N/s) rows: oha at that fixed rate over 64 connections, latency corrected; req/s is the
  rate kept, wrk us/r is oha's CPU; their best round is the one with the lowest p99.
srv us/r: CPU the server under test (tollgate, throttlecrab, or nginx for "direct") used
  per request; aux us/r: what it leans on (redis-server; nginx behind the proxy).
  wrk us/r: the load generator's.
other/steal: share of the 2 cores taken meanwhile by other processes / the hypervisor.
EOF
if [[ -s "$work/redis-commandstats.txt" ]]; then
  echo "redis-server time per call, inside redis (last round): $(paste -sd';' "$work/redis-commandstats.txt" | sed 's/;/; /g')"
fi
for f in "$work"/outcomes-*.txt; do
  [[ -s "$f" ]] || continue
  echo "decided by $(basename "$f" .txt | sed 's/outcomes-//') (last round): $(tr '\n' ' ' <"$f" | sed 's/  */ /g')"
done

# The goals: ratios of req/s, and what the proxy adds to nginx's own
# latency, on best rounds and then (ROUNDS > 1) as the median of each
# round's own ratio or difference; and ratios of server CPU per request
# (which other processes move less; above 1: memory cheaper).
cols=(--col 'open hot' .open.1 --col 'open 10k' .open.10000 --col 'closed hot' .closed.1 --col 'closed 10k' .closed.10000)
pcols=(--col c=64 '' --col c=1 1 --col "$rate/s" r)
goals() { # OF TITLE
  echo
  benchstat ratios "$results" --of "$1" --title "ratio of req/s, $2" "${cols[@]}" \
    --row 'memory / throttlecrab' 'mem{} / tc{}' '>=1.2' \
    --row 'memory / tollgate /healthz' 'mem{} / healthz' '>=0.9' \
    --row 'redis / memory' 'redis{} / mem{}' '>=0.7' \
    --row 'memory / ceiling' 'mem{} / ceiling' - \
    --row 'ceiling / tollgate /healthz' 'ceiling / healthz' -
  echo
  benchstat ratios "$results" --of "$1" --field p99 --fmt 3 --title "proxy - nginx direct (ms), $2" "${pcols[@]}" \
    --row 'p99, tollgate proxy' 'proxy{} - direct{}' '<=0.3' \
    --row 'p99, nginx proxy (peer)' 'nproxy{} - direct{}' - \
    --row 'p50, tollgate proxy' 'proxy{}:p50 - direct{}:p50' - \
    --row 'p50, nginx proxy (peer)' 'nproxy{}:p50 - direct{}:p50' -
}
goals best 'best rounds'
echo
benchstat ratios "$results" --of best --field srv --title 'ratio of server CPU per request, best rounds' "${cols[@]}" \
  --row 'throttlecrab / memory' 'tc{} / mem{}' - \
  --row 'tollgate /healthz / memory' 'healthz / mem{}' -
if ((rounds > 1)); then goals rounds 'median of per-round ratios'; fi
