#!/usr/bin/env bash
# The Envoy rate limit service under load, measured in ONE run against its
# peer and against tollgate's own HTTP check, all on the memory store with
# fixed windows, on the same 2 cores as the load generators:
#
#   grpc       `tollgate serve --grpc` (bench/grpc/*.yaml), driven by
#              bench/tools/grpc_load.rs: CONCURRENCY callers over ONE HTTP/2
#              connection, as Envoy multiplexes its calls;
#   http       the same process's HTTP API, POST /v1/check of the same
#              limits (rule envoy.DOMAIN.user), driven by wrk as bench/http.sh
#              drives it (2 threads, CONCURRENCY keep-alive connections);
#   limitador  Kuadrant's limitador-server (its Envoy RLS server, memory
#              store), the peer, with the same limits and grpc_load, when
#              ../shared/peers is present (built once into
#              target/bench-tools/bin); skipped, and said so, when absent;
#   xds        a second `tollgate serve --grpc` with the same limits (every
#              bench/grpc/*.yaml) delivered over ADS (`--xds-server`,
#              docs/xds.md) by crates/xds-harness (examples/xds_serve.rs:
#              one snapshot, as Envoy Gateway's server sends it), on the
#              Envoy Gateway scenarios: xds / grpc shows what the xDS path
#              costs per call (it should cost nothing: the limits are the
#              same tree once loaded);
#   redis      with BENCH_REDIS=1, `tollgate serve --grpc` on a local
#              redis-server too.
#
# Scenarios: admitted hot key (domain bench, 10^9/s), admitted 10k keys,
# denied hot key (bench_closed, 1/day); and three shaped as Envoy Gateway's
# (gRPC targets only): the limits its translator renders for six HTTPRoutes
# with BackendTrafficPolicy rules (bench/grpc/eg.yaml, domain
# default/eg/http), called as the Envoy it configures calls (descriptor
# entries as its rate limit actions make them, notes39.md §3.3): a route's
# header-match rule (route-name entry, then rule-0-match-0; one counter),
# 10k clients on a route with a per-client masked-remote-address rule
# (masked_remote_address, then key-only remote_address: a counter per
# client) and a route-wide rule, both descriptors in one call, and one user
# on a per-user header rule at 1/day (denied). limitador gets the closest
# limits its format has (bench/grpc/eg-limitador.yaml says what differs:
# no descriptor tree, conditions on entries by position, no shadow mode).
# Each (target, scenario) is run
# ROUNDS times, the targets alternating within a round; the table gives the
# median over rounds of each figure, and the server's CPU per call from /proc/PID/stat
# (utime + stime over the run / calls answered). The ratios are the
# medians of each round's own ratio (both sides measured seconds apart).
#
# Then a correctness check: CONCURRENCY callers released at once against 10
# calls per minute on one key (domains correct1, one call each, and correct2,
# four calls each), on tollgate and on limitador: each must admit exactly 10
# (or every call, when CONCURRENCY x calls is fewer).
#
# The machine is shared: a scenario during which other processes took more
# than BENCH_MAX_OTHER % (default 20) of the cores is measured again, up to
# BENCH_TRIES times (default 3), and the quietest attempt kept (benchstat
# settle; benchstat does every figure, bench/lib/common.sh).
#
# Usage: bench/grpc.sh [SECONDS per run, default 5] [CONCURRENCY, default 64] [ROUNDS, default 3]
# Env:   BENCH_PEERS=DIR (default ../shared/peers): where limitador's source is;
#        BENCH_REDIS=1: also the Redis store; BENCH_KEEP=DIR: keep the raw output;
#        BENCH_SCENARIOS=REGEX: only the scenarios whose id matches (open.1,
#        open.10000, closed.1, eg.route, eg.clients, eg.denied; e.g. '^eg');
#        BENCH_QUIET_BUSY / BENCH_QUIET_WAIT: as bench/http.sh.
set -euo pipefail
secs="${1:-5}"
conc="${2:-64}"
rounds="${3:-3}"
[[ "$secs" =~ ^[0-9]+$ && "$conc" =~ ^[0-9]+$ && "$rounds" =~ ^[0-9]+$ ]] &&
  ((secs >= 1 && secs <= 300 && conc >= 1 && conc <= 4096 && rounds >= 1 && rounds <= 10)) ||
  { echo "usage: bench/grpc.sh [SECONDS 1..300] [CONCURRENCY 1..4096] [ROUNDS 1..10]" >&2; exit 2; }
threads=2
# log, die, need_pkg, stop, free_port, start_tollgate, start_redis,
# measure (wrk), benchstat: shared with the other scripts.
source "$(dirname "$0")/lib/common.sh"
need_pkg wrk wrk
need_pkg ss iproute2
need_pkg curl curl

log "building tollgate, grpc_load and xds_serve (release)"
cargo build --release -q -p tollgate-server --bin tollgate --example grpc_load
cargo build --release -q -p xds-harness --example xds_serve
tollgate="$target/release/tollgate"
load="$target/release/examples/grpc_load"
xds_serve="$target/release/examples/xds_serve"

peers="${BENCH_PEERS:-$root/../shared/peers}"
limitador=
if [[ -x "$peers/build-limitador.sh" ]]; then
  [[ -x "$target/bench-tools/bin/limitador-server" ]] ||
    log "building limitador-server into $target/bench-tools/bin (5-10 minutes, once)"
  limitador=$("$peers/build-limitador.sh" "$target/bench-tools/bin" | tail -1)
  [[ -x "$limitador" ]] || die "build-limitador.sh gave no binary"
else
  echo "bench/grpc.sh: skipped limitador (no $peers/build-limitador.sh; set BENCH_PEERS=DIR)" >&2
fi

round=0
sut=()
aux=()

# --- servers -------------------------------------------------------------------
envoy_files=()
for f in rls rls-closed correct1 correct2 eg; do envoy_files+=(--envoy-config "bench/grpc/$f.yaml"); done
printf '[store]\ntimeout = "50ms"\non_error = "allow"\nprefix = "tollgate-grpc-bench"\n' >"$work/t.toml"

start_tollgate mem --config "$work/t.toml" --store memory --http 127.0.0.1:0 --grpc 127.0.0.1:0 "${envoy_files[@]}"
tg_pid=$pid tg_http=$addr tg_grpc=$(grpc_addr "$work/mem.log")
[[ -n "$tg_grpc" ]] || { cat "$work/mem.log" >&2; die "tollgate logged no gRPC address"; }

# The xds target: the same files, as JSON resources for xds_serve, served
# to node bench at version 1; tollgate opens its doors once it has them.
for f in rls rls-closed correct1 correct2 eg; do
  python3 -c 'import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), open(sys.argv[2], "w"))' \
    "bench/grpc/$f.yaml" "$work/xds-$f.json" || die "cannot convert bench/grpc/$f.yaml (python3-yaml)"
done
"$xds_serve" bench 1 "$work"/xds-*.json >"$work/xds-harness.log" 2>&1 &
pids+=("$!")
for _ in $(seq 100); do
  xds_addr=$(grep -o 'listening on [0-9.:]*' "$work/xds-harness.log" | sed 's|.* ||' || true)
  [[ -n "$xds_addr" ]] && break
  sleep 0.1
done
[[ -n "$xds_addr" ]] || { cat "$work/xds-harness.log" >&2; die "xds_serve logged no address"; }
start_tollgate xds --config "$work/t.toml" --store memory --http 127.0.0.1:0 --grpc 127.0.0.1:0 \
  --xds-server "http://$xds_addr" --xds-node-id bench
tx_pid=$pid tx_grpc=$(grpc_addr "$work/xds.log")
[[ -n "$tx_grpc" ]] || { cat "$work/xds.log" >&2; die "tollgate (xds) logged no gRPC address"; }

if [[ -n "${BENCH_REDIS:-}" ]]; then
  start_redis
  start_tollgate redis --config "$work/t.toml" --store "redis://127.0.0.1:$redis_port" \
    --http 127.0.0.1:0 --grpc 127.0.0.1:0 "${envoy_files[@]}"
  tr_pid=$pid tr_grpc=$(grpc_addr "$work/redis.log")
fi

# wait_port PORT PID: until something listens on PORT (10 s at most) while PID lives.
wait_port() {
  for _ in $(seq 100); do
    [[ -n "$(ss -Hltn "sport = :$1")" ]] && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
if [[ -n "$limitador" ]]; then
  lim_port=$(free_port)
  lim_http=$(free_port)
  # The peer's limits (bench's domains) and the Envoy Gateway ones: both
  # files are one YAML sequence, so they append.
  cat "$peers/limitador-bench-limits.yaml" bench/grpc/eg-limitador.yaml >"$work/limitador.yaml"
  "$limitador" -b 127.0.0.1 -p "$lim_port" -B 127.0.0.1 -P "$lim_http" \
    "$work/limitador.yaml" memory >"$work/limitador.log" 2>&1 &
  lim_pid=$!
  pids+=("$lim_pid")
  wait_port "$lim_port" "$lim_pid" || { cat "$work/limitador.log" >&2; die "limitador-server did not start"; }
  lim_version=$("$limitador" --version 2>/dev/null | head -1 || true)
fi

# --- measuring -------------------------------------------------------------------
# run_load ADDR DOMAIN KEYS SECONDS [CALLS [DESCRIPTORS]]: one grpc_load run; prints its line.
user_shape='user={key}' # grpc_load's default: one entry (user, k<i>)
run_load() {
  timeout $(($4 + 30)) "$load" "$1" "$conc" "$4" "$3" "$2" "${5:-0}" "${6:-$user_shape}" ||
    die "grpc_load failed against $1 ($2)"
}

# measure_grpc ID LABEL ADDR DOMAIN KEYS DESCRIPTORS: one grpc_load run;
# its record goes to $results as measure's does for wrk.
measure_grpc() {
  benchstat run --results "$results" --id "$1" --round "$round" --label "$2" --quiet \
    --sut "${sut[*]}" --aux "${aux[*]}" --parse grpc-load --out "$work/grpc-$1.$round.txt" -- \
    timeout $((secs + 30)) "$load" "$3" "$conc" "$secs" "$5" "$4" 0 "$6"
}

# Envoy Gateway's route names (irRouteName + hostname) and the entries its
# actions make: the route's generic_key, then each rule's chain
# (bench/grpc/eg.yaml); {ip} / {key}: the client address / header value
# drawn among KEYS.
r_backend=httproute/default/backend/rule/0/match/0/www_example_com
r_api=httproute/default/api/rule/0/match/0/api_example_com
r_login=httproute/default/login/rule/0/match/0/login_example_com
eg_route="$r_backend=$r_backend,rule-0-match-0=rule-0-match-0"
eg_clients="$r_api=$r_api,masked_remote_address=0.0.0.0/0,remote_address={ip};$r_api=$r_api,rule-1-match--1=rule-1-match--1"
eg_denied="$r_login=$r_login,rule-0-match-0={key}"

# ID DOMAIN KEYS DESCRIPTORS WHAT; ids eg.* are gRPC only (tollgate's HTTP
# check names an Envoy limit by domain and one key, not a chain).
scenarios=("open.1 bench 1 $user_shape admitted hot key" "open.10000 bench 10000 $user_shape admitted 10k keys"
  "closed.1 bench_closed 1 $user_shape denied hot key"
  "eg.route default/eg/http 1 $eg_route EG route header rule, admitted"
  "eg.clients default/eg/http 10000 $eg_clients EG per-client + route rule, 10k clients, admitted"
  "eg.denied default/eg/http 1 $eg_denied EG per-user header rule, denied")

# measure_scenario ID DOMAIN KEYS DESCRIPTORS WHAT: every target once on one scenario.
measure_scenario() {
  local id=$1 domain=$2 keys=$3 shape=$4 what=$5
  sut=("$tg_pid") aux=()
  measure_grpc "grpc.$id" "tollgate gRPC, $what" "$tg_grpc" "$domain" "$keys" "$shape"
  if [[ $id == eg.* ]]; then
    sut=("$tx_pid") aux=()
    measure_grpc "xds.$id" "tollgate gRPC, limits over xDS, $what" "$tx_grpc" "$domain" "$keys" "$shape"
  else
    measure "http.$id" "tollgate HTTP check, $what" "http://$tg_http" check.lua "$conc" -- tollgate "envoy.$domain.user" "$keys"
  fi
  if [[ -n "$limitador" ]]; then
    sut=("$lim_pid") aux=()
    measure_grpc "lim.$id" "limitador gRPC, $what" "127.0.0.1:$lim_port" "$domain" "$keys" "$shape"
  fi
  if [[ -n "${BENCH_REDIS:-}" ]]; then
    sut=("$tr_pid") aux=("$redis_pid")
    measure_grpc "redis.$id" "tollgate gRPC on Redis, $what" "$tr_grpc" "$domain" "$keys" "$shape"
  fi
}

# The machine is shared: a build elsewhere that takes a core during one
# target's run and not the other's decides a latency comparison by itself.
# A scenario whose runs saw other processes take more than BENCH_MAX_OTHER
# % of the cores is measured again (BENCH_TRIES times in all at most), and
# the attempt that saw the least is kept (benchstat settle).
all="$work/results"
attempt="$work/attempt"
for ((round = 1; round <= rounds; round++)); do
  for sc in "${scenarios[@]}"; do
    read -r id domain keys shape what <<<"$sc"
    [[ $id =~ ${BENCH_SCENARIOS:-.} ]] || continue
    if ((round == 1)); then # warm-up, not counted
      run_load "$tg_grpc" "$domain" "$keys" 1 0 "$shape" >/dev/null
      [[ $id == eg.* ]] && run_load "$tx_grpc" "$domain" "$keys" 1 0 "$shape" >/dev/null
      [[ $id == eg.* ]] ||
        timeout 30 wrk -t"$threads" -c"$conc" -d1s -s bench/http/check.lua "http://$tg_http" -- tollgate "envoy.$domain.user" "$keys" >/dev/null
      [[ -n "$limitador" ]] && run_load "127.0.0.1:$lim_port" "$domain" "$keys" 1 0 "$shape" >/dev/null
      [[ -n "${BENCH_REDIS:-}" ]] && run_load "$tr_grpc" "$domain" "$keys" 1 0 "$shape" >/dev/null
    fi
    results=$attempt
    for ((try = 1; ; try++)); do
      measure_scenario "$id" "$domain" "$keys" "$shape" "$what"
      rc=0
      benchstat settle --attempt "$attempt" --results "$all" --try "$try" --what "round $round, $what" || rc=$?
      ((rc == 0)) && break
      ((rc == 3)) || die "benchstat settle failed"
    done
  done
done
results=$all

# --- correctness -----------------------------------------------------------------
# 10 per minute: keep clear of a minute's edge, where a fixed window turns over.
while (($(date +%-S) < 2 || $(date +%-S) > 50)); do sleep 1; done
correct=()
check_exact() { # NAME ADDR DOMAIN CALLS-EACH
  local line admitted want=$((conc * $4 < 10 ? conc * $4 : 10))
  line=$(run_load "$2" "$3" 1 1 "$4")
  admitted=${line##*admitted }
  correct+=("$(printf '%-10s %-8s %3d callers x %d call(s), 10 per minute: admitted %s %s' \
    "$1" "$3" "$conc" "$4" "$admitted" "$( ((admitted == want)) && echo ok || echo "WRONG (not $want)")")")
}
check_exact tollgate "$tg_grpc" correct1 1
check_exact tollgate "$tg_grpc" correct2 4
if [[ -n "$limitador" ]]; then
  check_exact limitador "127.0.0.1:$lim_port" correct1 1
  check_exact limitador "127.0.0.1:$lim_port" correct2 4
fi

# --- report ------------------------------------------------------------------------
echo
echo "bench/grpc.sh $secs $conc $rounds: $conc callers (gRPC: one HTTP/2 connection; HTTP: wrk -t$threads, keep-alive connections), ${secs}s per run, $rounds round(s), medians over rounds; $(nproc) cores shared with the load generators"
echo "tollgate $(tree); ${lim_version:-limitador skipped}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
benchstat table "$results" --label 'target, scenario' --col calls/s rps 0 --col 'p50 ms' p50 3 \
  --col 'p99 ms' p99 3 --col denied non2xx 1% --col 'srv us/c' srv 2 --range '(min..max)' srv 2 \
  --col 'load us/c' load 2 --col other other 0%
echo
benchstat ratios "$results" --field srv --title 'server CPU per call, median per-round ratio' \
  --col 'admitted hot key' .open.1 --col 'admitted 10k keys' .open.10000 --col 'denied hot key' .closed.1 \
  --row 'tollgate gRPC / limitador' 'grpc{} / lim{}' '<=0.85' \
  --row 'tollgate gRPC / tollgate HTTP check' 'grpc{} / http{}' '<=1.1' \
  --row 'p99 latency, tollgate gRPC / limitador' 'grpc{}:p99 / lim{}:p99' '<=1'
echo
benchstat ratios "$results" --field srv --title 'Envoy Gateway shapes: server CPU per call, median per-round ratio' \
  --col 'route header rule' .eg.route --col 'per-client rule, 10k clients' .eg.clients --col 'per-user rule, denied' .eg.denied \
  --row 'tollgate gRPC / limitador' 'grpc{} / lim{}' '<=0.85' \
  --row 'tollgate gRPC, limits over xDS / from files' 'xds{} / grpc{}' '<=1.1' \
  --row 'p99 latency, tollgate gRPC / limitador' 'grpc{}:p99 / lim{}:p99' '<=1'
echo
echo "medians over rounds. srv us/c: CPU the server used per call (utime+stime from /proc/PID/stat over"
echo "  the run / calls), and its spread over rounds; load us/c: the load generator's (grpc_load or wrk);"
echo "  other: the share of the 2 cores other processes took meanwhile; denied: calls answered OVER_LIMIT / 429."
echo
echo "correctness ($conc callers released at once, one key, 10 per minute):"
printf '  %s\n' "${correct[@]}"
if printf '%s\n' "${correct[@]}" | grep -q WRONG; then exit 1; fi
