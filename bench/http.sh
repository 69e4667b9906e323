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
# move less than a ratio of two best rounds.
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
cd "$(dirname "$0")/.."
root=$PWD

secs="${1:-10}"
rounds="${2:-1}"
[[ "$secs" =~ ^[0-9]+$ && "$rounds" =~ ^[0-9]+$ ]] && ((secs >= 1 && secs <= 300 && rounds >= 1 && rounds <= 10)) ||
  { echo "usage: bench/http.sh [SECONDS per target, 1..300] [ROUNDS, 1..10]" >&2; exit 2; }
threads=2
conns=64
keys=10000
hz=$(getconf CLK_TCK)

# log, die, need_pkg, stop, free_port, wait_http, start_tollgate, to_ms,
# proc_ticks, cpu_ticks, wait_quiet: shared with bench/grpc.sh.
source "$root/bench/lib/measure.sh"
need_pkg wrk wrk
need_pkg redis-server redis-server
need_pkg redis-cli redis-tools
need_pkg nginx nginx-light
need_pkg ss iproute2
need_pkg curl curl

tools="$root/target/bench-tools"
tc_bin="$tools/bin/throttlecrab-server"
if [[ ! -x "$tc_bin" ]]; then
  need_pkg protoc protobuf-compiler # throttlecrab-server's build compiles its gRPC protos
  log "installing throttlecrab-server 0.4 into $tools (cargo install)"
  cargo install -q --locked --root "$tools" throttlecrab-server --version '^0.4'
fi
tc_version=$("$tc_bin" --version 2>/dev/null | head -1 || true)
oha_bin="$tools/bin/oha"
if [[ ! -x "$oha_bin" ]]; then
  # oha 1.16 does not build without a TLS backend; native-tls needs OpenSSL.
  need_pkg pkg-config pkg-config
  dpkg -s libssl-dev >/dev/null 2>&1 || { log "installing libssl-dev (apt-get)"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libssl-dev >/dev/null; }
  log "installing oha 1.16 into $tools (cargo install)"
  cargo install -q --locked --root "$tools" oha --version '~1.16' --no-default-features --features native-tls
fi
rate="${BENCH_RATE:-2000}"
[[ "$rate" =~ ^[0-9]+$ ]] && ((rate >= 1 && rate <= 1000000)) || die "BENCH_RATE must be 1..1000000 requests/s"

log "building tollgate (release)"
cargo build --release -q -p tollgate-server --bin tollgate --example http_ceiling
tollgate="$root/target/release/tollgate"
ceiling="$root/target/release/examples/http_ceiling"

# --- processes ---------------------------------------------------------------
work=$(mktemp -d)
keep="${BENCH_KEEP:-}"
pids=()
cleanup() {
  while ((${#pids[@]})); do stop "${pids[-1]}"; done
  if [[ -n "$keep" ]]; then mkdir -p "$keep" && cp -r "$work"/. "$keep"/ 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


# --- measuring -----------------------------------------------------------------
results="$work/results"
: >"$results"
round=0
sut=() # the server under test (its CPU is the "srv" column)
aux=() # what it leans on: redis-server, the proxy's upstream ("aux" column)


# measure_rate ID LABEL URL: one oha run at the fixed rate $rate over $conns
# connections (every request sends `x-key: k1`, which the proxies' rules key
# on), latency corrected for coordinated omission (measured from when each
# request was due, not from when it could be sent); appends a row to
# $results like measure (the "wrk" column is then oha's CPU).
measure_rate() {
  local id=$1 label=$2 url=$3
  wait_quiet
  log "round $round: $label: oha -c$conns -q$rate -z${secs}s --latency-correction $url"
  local out="$work/oha-$id.$round.json"
  cpu_begin
  local TIMEFORMAT='%U %S'
  { time timeout $((secs + 30)) "$oha_bin" -z "${secs}s" -c "$conns" -q "$rate" --latency-correction \
      --no-tui --output-format json -H 'x-key: k1' "$url/" >"$out" 2>"$out.err"; } 2>"$out.time" ||
    { cat "$out.err" >&2; die "oha failed on $label"; }
  cpu_end
  local fields
  fields=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
s, p, codes = d["summary"], d["latencyPercentiles"], d.get("statusCodeDistribution") or {}
n = sum(codes.values())
non = sum(v for k, v in codes.items() if not k.startswith("2"))
print("%.1f %.3f %.3f %d %d" % (s["requestsPerSec"], 1e3 * p["p50"], 1e3 * p["p99"], n, non))' "$out") ||
    die "no result from oha on $label"
  local rps p50 p99 total non
  read -r rps p50 p99 total non <<<"$fields"
  ((total > 0)) || die "oha answered nothing on $label"
  cpu_row "$id" "$label" "$rps" "$p50" "$p99" "$total" "$non" "$(awk '{print $1 + $2}' "$out.time")"
}

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
  local tg redis_pid redis_port tc_pid tc_port ng_pid ng_port proxy_pid proxy_addr
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
  redis_port=$(free_port)
  mkdir -p "$work/redis"
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$work/redis" --daemonize no --logfile "$work/redis/log" &
  redis_pid=$!
  pids+=("$redis_pid")
  for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p "$redis_port" ping >/dev/null || die "redis-server did not start"
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
  local ng_worker
  ng_worker=$(pgrep -P "$ng_pid" | tr '\n' ' ')
  start_tollgate proxy --config bench/http/proxy.toml --proxy 127.0.0.1:0 \
    --upstream "http://127.0.0.1:$ng_port"
  proxy_pid=$pid proxy_addr=$addr
  wait_http "http://$proxy_addr/"
  expect "proxy headers" "$(curl -si --max-time 2 -H 'x-key: probe' "http://$proxy_addr/")" 'ratelimit-policy'
  # nginx as the same kind of proxy (rate limited by x-key, pooled
  # keep-alive upstream connections), in front of the same nginx.
  local np_port np_pid np_workers
  np_port=$(free_port)
  mkdir -p "$work/nginx-proxy"
  sed -e "s|@DIR@|$work/nginx-proxy|g" -e "s|@PORT@|$np_port|g" -e "s|@UPSTREAM@|$ng_port|g" \
    bench/http/nginx-proxy.conf.in >"$work/nginx-proxy/nginx.conf"
  nginx -e "$work/nginx-proxy/nginx-error.log" -p "$work/nginx-proxy" -c "$work/nginx-proxy/nginx.conf" &
  np_pid=$!
  pids+=("$np_pid")
  wait_http "http://127.0.0.1:$np_port/"
  np_workers=$(pgrep -P "$np_pid" | tr '\n' ' ')
  # shellcheck disable=SC2206
  sut=("$ng_pid" $ng_worker) aux=()
  measure direct "nginx direct (c=$conns)" "http://127.0.0.1:$ng_port" get.lua "$conns" -- / "$keys"
  measure direct1 "nginx direct (c=1)" "http://127.0.0.1:$ng_port" get.lua 1 -- / "$keys"
  measure_rate directr "nginx direct ($rate/s)" "http://127.0.0.1:$ng_port"
  # shellcheck disable=SC2206
  sut=("$proxy_pid") aux=("$ng_pid" $ng_worker)
  measure proxy "proxy -> nginx (c=$conns)" "http://$proxy_addr" get.lua "$conns" -- / "$keys"
  measure proxy1 "proxy -> nginx (c=1)" "http://$proxy_addr" get.lua 1 -- / "$keys"
  measure_rate proxyr "proxy -> nginx ($rate/s)" "http://$proxy_addr"
  # shellcheck disable=SC2206
  sut=("$np_pid" $np_workers) aux=("$ng_pid" $ng_worker)
  measure nproxy "nginx proxy -> nginx (c=$conns)" "http://127.0.0.1:$np_port" get.lua "$conns" -- / "$keys"
  measure nproxy1 "nginx proxy -> nginx (c=1)" "http://127.0.0.1:$np_port" get.lua 1 -- / "$keys"
  measure_rate nproxyr "nginx proxy -> nginx ($rate/s)" "http://127.0.0.1:$np_port"
  stop "$np_pid"
  stop "$proxy_pid"
  stop "$ng_pid"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((round = 1; round <= rounds; round++)); do one_round; done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# --- report --------------------------------------------------------------------
# Per target: its best round (highest req/s); the spread is min..max req/s.
best="$work/best"
awk -F'|' '
  # (fixed-rate rows, whose req/s is the rate: the round with the lowest p99)
  { fixed = ($1 ~ /^(direct|proxy|nproxy)r$/)
    key = fixed ? -$6 : $4 + 0
    if (!($1 in rps)) order[++n] = $1
    if (!($1 in rps) || key > rps[$1]) { rps[$1] = key; row[$1] = $0 }
    if (!($1 in lo) || $4 + 0 < lo[$1]) lo[$1] = $4 + 0 }
  END { for (i = 1; i <= n; i++) print row[order[i]] "|" lo[order[i]] }' "$results" >"$best"
# best: id|label|round|req/s|p50|p99|non2xx|srv|wrk|other|steal|errors|aux|min req/s

echo
echo "bench/http.sh $secs $rounds: wrk -t$threads -c$conns -d${secs}s --latency per target, $rounds round(s)$( ((rounds > 1)) && echo ', best round per target'); $(nproc) cores shared by wrk and the server"
echo "tollgate $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (+ uncommitted changes in crates/)'); ${tc_version:-throttlecrab-server}; redis $(redis-server --version | grep -o 'v=[0-9.]*' | cut -d= -f2); nginx $(nginx -v 2>&1 | grep -o '[0-9.]*$'); load average before $load_before, after $load_after"
echo
awk -F'|' -v rounds="$rounds" '
  BEGIN {
    printf "%-34s %9s %8s %8s %7s %8s %8s %8s %6s %6s", "target", "req/s", "p50 ms", "p99 ms", "non2xx", "srv us/r", "aux us/r", "wrk us/r", "other", "steal"
    if (rounds > 1) printf "  %s", "req/s min..max"
    printf "\n" }
  { printf "%-34s %9.0f %8.3f %8.3f %6.1f%% %8.2f %8s %8.2f %5.0f%% %5.0f%%", $2, $4, $5, $6, $7, $8, $13, $9, $10, $11
    if (rounds > 1) printf "  %.0f..%.0f", $14, $4
    if ($12 != "") printf "  socket errors: %s", $12
    printf "\n" }' "$best"
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
echo
awk -F'|' -v rate="$rate" '
  { rps[$1] = $4; p50[$1] = $5; p99[$1] = $6; srv[$1] = $8 }
  function verdict(worst, want, op) { return (op == "") ? "" : ((op == ">=" ? worst >= want : worst <= want) ? "met" : "MISSED") }
  function line(name, op, want, pre,   i, v, worst, out) {
    out = sprintf("%-31s %6s", name, (op == "") ? "" : op want)
    for (i = 1; i <= 4; i++) {
      v = vals[pre i]
      out = out sprintf(" %10.2f", v)
      if (i == 1 || v < worst) worst = v
    }
    printf "%s   %.2f %s\n", out, worst, verdict(worst, want, op)
  }
  function r(a, b) { return (b > 0) ? a / b : 0 }
  END {
    split("open.1 open.10000 closed.1 closed.10000", sc, " ")
    printf "%-31s %6s %10s %10s %10s %10s   %s\n", "ratio of req/s", "goal", "open hot", "open 10k", "closed hot", "closed 10k", "worst"
    for (i = 1; i <= 4; i++) {
      vals["a" i] = r(rps["mem." sc[i]], rps["tc." sc[i]])
      vals["b" i] = r(rps["mem." sc[i]], rps["healthz"])
      vals["c" i] = r(rps["redis." sc[i]], rps["mem." sc[i]])
    }
    line("memory / throttlecrab", ">=", 1.2, "a")
    line("memory / tollgate /healthz", ">=", 0.9, "b")
    line("redis / memory", ">=", 0.7, "c")
    # Against the ceiling (a check that does nothing, same HTTP exchange):
    # how much of the HTTP ceiling the check path keeps, and what the POST
    # exchange alone costs next to GET /healthz.
    for (i = 1; i <= 4; i++) vals["f" i] = r(rps["mem." sc[i]], rps["ceiling"])
    line("memory / ceiling", "", 0, "f")
    printf "%-31s %6s %10.2f   (the most any check can reach against /healthz)\n", "ceiling / tollgate /healthz", "", r(rps["ceiling"], rps["healthz"])
    # The same comparisons in server CPU per request (noise from other
    # processes moves these less than req/s): above 1 = memory cheaper.
    for (i = 1; i <= 4; i++) {
      vals["d" i] = r(srv["tc." sc[i]], srv["mem." sc[i]])
      vals["e" i] = r(srv["healthz"], srv["mem." sc[i]])
    }
    printf "\n%-31s %6s %10s %10s %10s %10s   %s\n", "ratio of server CPU per request", "", "open hot", "open 10k", "closed hot", "closed 10k", "worst"
    line("throttlecrab / memory", "", 0, "d")
    line("tollgate /healthz / memory", "", 0, "e")
    printf "\n%-31s %6s %10s %10s %10s\n", "proxy - direct (ms)", "goal", "c=64", "c=1", rate "/s"
    d64 = p99["proxy"] - p99["direct"]; d1 = p99["proxy1"] - p99["direct1"]; dr = p99["proxyr"] - p99["directr"]
    printf "%-31s %6s %10.3f %10.3f %10.3f   %s (c=64), %s (c=1), %s (%d/s)\n", "  p99, tollgate proxy", "<=0.3", d64, d1, dr, verdict(d64, 0.3, "<="), verdict(d1, 0.3, "<="), verdict(dr, 0.3, "<="), rate
    printf "%-31s %6s %10.3f %10.3f %10.3f\n", "  p99, nginx proxy (peer)", "", p99["nproxy"] - p99["direct"], p99["nproxy1"] - p99["direct1"], p99["nproxyr"] - p99["directr"]
    printf "%-31s %6s %10.3f %10.3f %10.3f\n", "  p50, tollgate proxy", "", p50["proxy"] - p50["direct"], p50["proxy1"] - p50["direct1"], p50["proxyr"] - p50["directr"]
    printf "%-31s %6s %10.3f %10.3f %10.3f\n", "  p50, nginx proxy (peer)", "", p50["nproxy"] - p50["direct"], p50["nproxy1"] - p50["direct1"], p50["nproxyr"] - p50["directr"]
    printf "%-31s %6s %10.0f %10.0f\n", "  req/s direct", "", rps["direct"], rps["direct1"]
    printf "%-31s %6s %10.0f %10.0f\n", "  req/s tollgate proxy", "", rps["proxy"], rps["proxy1"]
    printf "%-31s %6s %10.0f %10.0f\n", "  req/s nginx proxy", "", rps["nproxy"], rps["nproxy1"]
  }' "$best"

# The same goals as the median, over rounds, of each round's own ratio or
# difference (both sides from the same round).
if ((rounds > 1)); then
  echo
  awk -F'|' -v rounds="$rounds" '
    { rps[$3, $1] = $4 + 0; p99[$3, $1] = $6 + 0 }
    function median(a, n,   i, j, t) {
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
      return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function r(a, b) { return (b > 0) ? a / b : 0 }
    function med_ratio(num, den,   k, v, n) {
      n = 0
      for (k = 1; k <= rounds; k++) if (((k, num) in rps) && ((k, den) in rps)) v[++n] = r(rps[k, num], rps[k, den])
      return n ? median(v, n) : 0
    }
    function med_diff(a, b,   k, v, n) {
      n = 0
      for (k = 1; k <= rounds; k++) if (((k, a) in p99) && ((k, b) in p99)) v[++n] = p99[k, a] - p99[k, b]
      return n ? median(v, n) : 0
    }
    function line(name, op, want, num, den, sfx,   i, v, worst, out) {
      out = sprintf("%-31s %6s", name, op want)
      for (i = 1; i <= 4; i++) {
        v = med_ratio(num sc[i], (den == "healthz") ? den : den sc[i])
        out = out sprintf(" %10.2f", v)
        if (i == 1 || v < worst) worst = v
      }
      printf "%s   %.2f %s\n", out, worst, (worst >= want) ? "met" : "MISSED"
    }
    END {
      split(".open.1 .open.10000 .closed.1 .closed.10000", sc, " ")
      printf "%-31s %6s %10s %10s %10s %10s   %s\n", "median of per-round ratios", "goal", "open hot", "open 10k", "closed hot", "closed 10k", "worst"
      line("memory / throttlecrab", ">=", 1.2, "mem", "tc")
      line("memory / tollgate /healthz", ">=", 0.9, "mem", "healthz")
      line("redis / memory", ">=", 0.7, "redis", "mem")
      printf "%-31s %6s %10s %10s %10s\n", "median proxy - direct p99 (ms)", "goal", "c=64", "c=1", "fixed rate"
      printf "%-31s %6s %10.3f %10.3f %10.3f\n", "  tollgate proxy", "<=0.3", med_diff("proxy", "direct"), med_diff("proxy1", "direct1"), med_diff("proxyr", "directr")
      printf "%-31s %6s %10.3f %10.3f %10.3f\n", "  nginx proxy (peer)", "", med_diff("nproxy", "direct"), med_diff("nproxy1", "direct1"), med_diff("nproxyr", "directr")
    }' "$results"
fi
