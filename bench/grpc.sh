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
#   redis      with BENCH_REDIS=1, `tollgate serve --grpc` on a local
#              redis-server too.
#
# Scenarios: admitted hot key (domain bench, 10^9/s), admitted 10k keys,
# denied hot key (bench_closed, 1/day). Each (target, scenario) is run
# ROUNDS times, the targets alternating within a round; the table gives the
# median round of each, and the server's CPU per call from /proc/PID/stat
# (utime + stime over the run / calls answered). The ratios are the
# medians of each round's own ratio (both sides measured seconds apart).
#
# Then a correctness check: CONCURRENCY callers released at once against 10
# calls per minute on one key (domains correct1, one call each, and correct2,
# four calls each), on tollgate and on limitador: each must admit exactly 10.
#
# The machine is shared: a scenario during which other processes took more
# than BENCH_MAX_OTHER % (default 20) of the cores is measured again, up to
# BENCH_TRIES times (default 3), and the quietest attempt kept.
#
# Usage: bench/grpc.sh [SECONDS per run, default 5] [CONCURRENCY, default 64] [ROUNDS, default 3]
# Env:   BENCH_PEERS=DIR (default ../shared/peers): where limitador's source is;
#        BENCH_REDIS=1: also the Redis store; BENCH_KEEP=DIR: keep the raw output;
#        BENCH_QUIET_BUSY / BENCH_QUIET_WAIT: as bench/http.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
secs="${1:-5}"
conc="${2:-64}"
rounds="${3:-3}"
[[ "$secs" =~ ^[0-9]+$ && "$conc" =~ ^[0-9]+$ && "$rounds" =~ ^[0-9]+$ ]] &&
  ((secs >= 1 && secs <= 300 && conc >= 1 && conc <= 4096 && rounds >= 1 && rounds <= 10)) ||
  { echo "usage: bench/grpc.sh [SECONDS 1..300] [CONCURRENCY 1..4096] [ROUNDS 1..10]" >&2; exit 2; }
threads=2
hz=$(getconf CLK_TCK)
# log, die, need_pkg, stop, free_port, start_tollgate, proc_ticks,
# cpu_begin/cpu_end/cpu_row, measure (wrk), wait_quiet: shared with bench/http.sh.
source "$root/bench/lib/measure.sh"
need_pkg wrk wrk
need_pkg ss iproute2
need_pkg curl curl
if [[ -n "${BENCH_REDIS:-}" ]]; then
  need_pkg redis-server redis-server
  need_pkg redis-cli redis-tools
fi

log "building tollgate and grpc_load (release)"
cargo build --release -q -p tollgate-server --bin tollgate --example grpc_load
tollgate="$root/target/release/tollgate"
load="$root/target/release/examples/grpc_load"

peers="${BENCH_PEERS:-$root/../shared/peers}"
limitador=
if [[ -x "$peers/build-limitador.sh" ]]; then
  [[ -x "$root/target/bench-tools/bin/limitador-server" ]] ||
    log "building limitador-server into target/bench-tools/bin (5-10 minutes, once)"
  limitador=$("$peers/build-limitador.sh" "$root/target/bench-tools/bin" | tail -1)
  [[ -x "$limitador" ]] || die "build-limitador.sh gave no binary"
else
  echo "bench/grpc.sh: skipped limitador (no $peers/build-limitador.sh; set BENCH_PEERS=DIR)" >&2
fi

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
results="$work/results"
: >"$results"
round=0
sut=()
aux=()

# --- servers -------------------------------------------------------------------
envoy_files=()
for f in rls rls-closed correct1 correct2; do envoy_files+=(--envoy-config "bench/grpc/$f.yaml"); done
printf '[store]\ntimeout = "50ms"\non_error = "allow"\nprefix = "tollgate-grpc-bench"\n' >"$work/t.toml"

# grpc_addr LOG: the gRPC address tollgate logged.
grpc_addr() { grep -o 'gRPC) listening on [0-9.:]*' "$1" | head -1 | sed 's|.* ||'; }

start_tollgate mem --config "$work/t.toml" --store memory --http 127.0.0.1:0 --grpc 127.0.0.1:0 "${envoy_files[@]}"
tg_pid=$pid tg_http=$addr tg_grpc=$(grpc_addr "$work/mem.log")
[[ -n "$tg_grpc" ]] || { cat "$work/mem.log" >&2; die "tollgate logged no gRPC address"; }

if [[ -n "${BENCH_REDIS:-}" ]]; then
  redis_port=$(free_port)
  mkdir -p "$work/redis"
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$work/redis" --daemonize no --logfile "$work/redis/log" &
  redis_pid=$!
  pids+=("$redis_pid")
  for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
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
  "$limitador" -b 127.0.0.1 -p "$lim_port" -B 127.0.0.1 -P "$lim_http" \
    "$peers/limitador-bench-limits.yaml" memory >"$work/limitador.log" 2>&1 &
  lim_pid=$!
  pids+=("$lim_pid")
  wait_port "$lim_port" "$lim_pid" || { cat "$work/limitador.log" >&2; die "limitador-server did not start"; }
  lim_version=$("$limitador" --version 2>/dev/null | head -1 || true)
fi

# --- measuring -------------------------------------------------------------------
# run_load ADDR DOMAIN KEYS SECONDS [CALLS]: one grpc_load run; prints its line.
run_load() {
  timeout $(($4 + 30)) "$load" "$1" "$conc" "$4" "$3" "$2" "${5:-0}" ||
    die "grpc_load failed against $1 ($2)"
}

# measure_grpc ID LABEL ADDR DOMAIN KEYS: one grpc_load run; appends a row
# to $results as measure does for wrk.
measure_grpc() {
  local id=$1 label=$2 out="$work/grpc-$1.$round.txt"
  wait_quiet
  log "round $round: $label: grpc_load $3 c=$conc ${secs}s domain $4, $5 key(s)"
  cpu_begin
  local TIMEFORMAT='%U %S'
  { time run_load "$3" "$4" "$5" "$secs" >"$out" 2>&1; } 2>"$out.time" || { cat "$out" >&2; die "$label failed"; }
  cpu_end
  # requests N in Xs: R req/s, over_limit P%, p50 A ms, p99 B ms, admitted K
  local n rps p50 p99 admitted
  read -r n rps p50 p99 admitted < <(awk '{ gsub(/,/, ""); print $2, $5, $10, $13, $16 }' "$out")
  [[ -n "$admitted" && "$n" -gt 0 ]] || { cat "$out" >&2; die "no result from grpc_load on $label"; }
  cpu_row "$id" "$label" "$rps" "$p50" "$p99" "$n" "$((n - admitted))" "$(awk '{print $1 + $2}' "$out.time")"
}

scenarios=("open.1 bench 1 admitted hot key" "open.10000 bench 10000 admitted 10k keys" "closed.1 bench_closed 1 denied hot key")

# measure_scenario ID DOMAIN KEYS WHAT: every target once on one scenario.
measure_scenario() {
  local id=$1 domain=$2 keys=$3 what=$4
  sut=("$tg_pid") aux=()
  measure_grpc "grpc.$id" "tollgate gRPC, $what" "$tg_grpc" "$domain" "$keys"
  measure "http.$id" "tollgate HTTP check, $what" "http://$tg_http" check.lua "$conc" -- tollgate "envoy.$domain.user" "$keys"
  if [[ -n "$limitador" ]]; then
    sut=("$lim_pid") aux=()
    measure_grpc "lim.$id" "limitador gRPC, $what" "127.0.0.1:$lim_port" "$domain" "$keys"
  fi
  if [[ -n "${BENCH_REDIS:-}" ]]; then
    sut=("$tr_pid") aux=("$redis_pid")
    measure_grpc "redis.$id" "tollgate gRPC on Redis, $what" "$tr_grpc" "$domain" "$keys"
  fi
}

# The machine is shared: a build elsewhere that takes a core during one
# target's run and not the other's decides a latency comparison by itself.
# A scenario whose runs saw other processes take more than $max_other % of
# the cores is measured again (at most $tries times in all), and the
# attempt that saw the least is kept.
max_other="${BENCH_MAX_OTHER:-20}"
tries="${BENCH_TRIES:-3}"
[[ "$max_other" =~ ^[0-9]+$ && "$tries" =~ ^[0-9]+$ ]] && ((tries >= 1)) || die "BENCH_MAX_OTHER and BENCH_TRIES must be whole numbers, BENCH_TRIES at least 1"
all="$work/all-results"
: >"$all"
for ((round = 1; round <= rounds; round++)); do
  for sc in "${scenarios[@]}"; do
    read -r id domain keys what <<<"$sc"
    if ((round == 1)); then # warm-up, not counted
      run_load "$tg_grpc" "$domain" "$keys" 1 >/dev/null
      timeout 30 wrk -t"$threads" -c"$conc" -d1s -s bench/http/check.lua "http://$tg_http" -- tollgate "envoy.$domain.user" "$keys" >/dev/null
      [[ -n "$limitador" ]] && run_load "127.0.0.1:$lim_port" "$domain" "$keys" 1 >/dev/null
      [[ -n "${BENCH_REDIS:-}" ]] && run_load "$tr_grpc" "$domain" "$keys" 1 >/dev/null
    fi
    best= best_other=
    for ((try = 1; try <= tries; try++)); do
      results="$work/results.$round.$id.$try"
      : >"$results"
      measure_scenario "$id" "$domain" "$keys" "$what"
      other=$(awk -F'|' '$10 + 0 > m { m = $10 + 0 } END { print m + 0 }' "$results")
      if [[ -z "$best" ]] || ((other < best_other)); then best=$results best_other=$other; fi
      ((other <= max_other)) && break
      ((try < tries)) && log "round $round: other processes took up to ${other}% of the cores during $what; measuring it again"
    done
    cat "$best" >>"$all"
  done
done
results=$all

# --- correctness -----------------------------------------------------------------
# 10 per minute: keep clear of a minute's edge, where a fixed window turns over.
while (($(date +%-S) < 2 || $(date +%-S) > 50)); do sleep 1; done
correct=()
check_exact() { # NAME ADDR DOMAIN CALLS-EACH
  local line admitted
  line=$(run_load "$2" "$3" 1 1 "$4")
  admitted=${line##*admitted }
  correct+=("$(printf '%-10s %-8s %3d callers x %d call(s), 10 per minute: admitted %s %s' \
    "$1" "$3" "$conc" "$4" "$admitted" "$( ((admitted == 10)) && echo ok || echo WRONG)")")
}
check_exact tollgate "$tg_grpc" correct1 1
check_exact tollgate "$tg_grpc" correct2 4
if [[ -n "$limitador" ]]; then
  check_exact limitador "127.0.0.1:$lim_port" correct1 1
  check_exact limitador "127.0.0.1:$lim_port" correct2 4
fi

# --- report ------------------------------------------------------------------------
echo
echo "bench/grpc.sh $secs $conc $rounds: $conc callers (gRPC: one HTTP/2 connection; HTTP: wrk -t$threads, keep-alive connections), ${secs}s per run, $rounds round(s), median round per row; $(nproc) cores shared with the load generators"
echo "tollgate $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- crates 2>/dev/null || echo ' (+ uncommitted changes in crates/)'); ${lim_version:-limitador skipped}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
# results: id|label|round|req/s|p50|p99|non2xx %|srv us/r|load us/r|other %|steal %|errors|aux us/r
awk -F'|' -v rounds="$rounds" '
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function med(field, id,   k, v, n) { n = 0; for (k = 1; k <= rounds; k++) if ((k, id) in row) v[++n] = f[k, id, field]; return n ? median(v, n) : 0 }
  function lo(field, id,   k, m) { m = ""; for (k = 1; k <= rounds; k++) if ((k, id) in row && (m == "" || f[k, id, field] < m)) m = f[k, id, field]; return m }
  function hi(field, id,   k, m) { m = ""; for (k = 1; k <= rounds; k++) if ((k, id) in row && (m == "" || f[k, id, field] > m)) m = f[k, id, field]; return m }
  # the median over rounds of each round s own ratio a/b of field
  function ratio(field, a, b,   k, v, n) {
    n = 0
    for (k = 1; k <= rounds; k++) if (((k, a) in row) && ((k, b) in row) && f[k, b, field] > 0) v[++n] = f[k, a, field] / f[k, b, field]
    return n ? median(v, n) : -1
  }
  { row[$3, $1] = 1; for (i = 4; i <= 13; i++) f[$3, $1, i] = $i + 0
    if (!($1 in seen)) { seen[$1] = 1; order[++ids] = $1; label[$1] = $2 } }
  END {
    printf "%-44s %9s %8s %8s %7s %9s %13s %8s %6s\n", "target, scenario", "calls/s", "p50 ms", "p99 ms", "denied", "srv us/c", "(min..max)", "load us/c", "other"
    for (i = 1; i <= ids; i++) {
      id = order[i]
      printf "%-44s %9.0f %8.3f %8.3f %6.1f%% %9.2f %13s %8.2f %5.0f%%\n", label[id], med(4, id), med(5, id), med(6, id), med(7, id),
        med(8, id), sprintf("(%.2f..%.2f)", lo(8, id), hi(8, id)), med(9, id), med(10, id)
    }
    split("open.1 open.10000 closed.1", sc, " ")
    split("admitted hot key|admitted 10k keys|denied hot key", name, "|")
    printf "\n%-44s %10s %10s %10s   %s\n", "server CPU per call, median per-round ratio", name[1], name[2], name[3], "goal"
    printf "%-44s", "tollgate gRPC / limitador"; worst = 0; miss = 0
    for (i = 1; i <= 3; i++) { r = ratio(8, "grpc." sc[i], "lim." sc[i]); printf " %10s", (r < 0) ? "-" : sprintf("%.2f", r); if (r < 0) miss = -1; else if (r > 0.85 && miss >= 0) miss = 1 }
    printf "   <= 0.85 %s\n", (miss < 0) ? "(no limitador)" : (miss ? "MISSED" : "met")
    printf "%-44s", "tollgate gRPC / tollgate HTTP check"; miss = 0
    for (i = 1; i <= 3; i++) { r = ratio(8, "grpc." sc[i], "http." sc[i]); printf " %10.2f", r; if (r > 1.1) miss = 1 }
    printf "   <= 1.1  %s\n", miss ? "MISSED" : "met"
    printf "%-44s", "p99 latency, tollgate gRPC / limitador"; miss = 0
    for (i = 1; i <= 3; i++) { r = ratio(6, "grpc." sc[i], "lim." sc[i]); printf " %10s", (r < 0) ? "-" : sprintf("%.2f", r); if (r < 0) miss = -1; else if (r > 1 && miss >= 0) miss = 1 }
    printf "   <= 1    %s\n", (miss < 0) ? "(no limitador)" : (miss ? "MISSED" : "met")
  }' "$results"
echo
echo "srv us/c: CPU the server used per call (utime+stime from /proc/PID/stat over the run / calls), median"
echo "  round and the spread over rounds; load us/c: the load generator's (grpc_load or wrk); other: the"
echo "  share of the 2 cores other processes took meanwhile; denied: calls answered OVER_LIMIT / 429."
echo
echo "correctness ($conc callers released at once, one key, 10 per minute):"
printf '  %s\n' "${correct[@]}"
if printf '%s\n' "${correct[@]}" | grep -q WRONG; then exit 1; fi
