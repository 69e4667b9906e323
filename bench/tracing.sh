#!/usr/bin/env bash
# What tracing costs the Envoy rate limit service (docs/tracing.md,
# "Overhead"): the server's CPU per ShouldRateLimit call, measured in ONE
# run on three `tollgate serve --grpc` processes on the memory store
# (bench/grpc/rls.yaml, as bench/grpc.sh):
#
#   off    tracing off (the default; nothing built, spans cost a level check)
#   1%     OTLP/gRPC to a counting receiver, parentbased_traceidratio 0.01
#   100%   the same at ratio 1: every call's spans (the door's and the
#          store's) built, batched and sent
#
# Every call is a root (grpc_load sends no trace context), so the ratio is
# the share of calls traced. The receiver is otlp-harness's counting sink
# (crates/otlp-harness/examples/otlp_sink.rs): it decodes each export and
# keeps only a count; its CPU is reported apart (aux), not in the server's.
# The batch processor is sized so that 100% keeps up (OTEL_BSP_SCHEDULE_DELAY
# 200 ms, OTEL_BSP_MAX_QUEUE_SIZE 65536): spans dropped would make tracing
# look cheaper than it is; the spans received are printed.
#
# Scenarios: admitted hot key, admitted 10k keys, as bench/grpc.sh. Each
# (target, scenario) runs ROUNDS times, the targets alternating within a
# round; the server's CPU per call is utime + stime from /proc/PID/stat over
# the run / calls answered (benchstat run, as bench/grpc.sh measures it).
# The table and the ratios go to stdout and to RESULTS (default
# bench/tracing-results.txt).
#
# Usage: bench/tracing.sh [SECONDS per run, default 5] [CONCURRENCY, default 64] [ROUNDS, default 3]
# Env:   BENCH_RESULTS=FILE (default bench/tracing-results.txt); BENCH_KEEP=DIR: keep the raw output.
set -euo pipefail
secs="${1:-5}"
conc="${2:-64}"
rounds="${3:-3}"
[[ "$secs" =~ ^[0-9]+$ && "$conc" =~ ^[0-9]+$ && "$rounds" =~ ^[0-9]+$ ]] &&
  ((secs >= 1 && secs <= 300 && conc >= 1 && conc <= 4096 && rounds >= 1 && rounds <= 10)) ||
  { echo "usage: bench/tracing.sh [SECONDS 1..300] [CONCURRENCY 1..4096] [ROUNDS 1..10]" >&2; exit 2; }
threads=2
source "$(dirname "$0")/lib/common.sh"
out_file="${BENCH_RESULTS:-$root/bench/tracing-results.txt}"

log "building tollgate, grpc_load and otlp_sink (release)"
cargo build --release -q -p tollgate-server --bin tollgate --example grpc_load \
  -p otlp-harness --example otlp_sink
tollgate="$target/release/tollgate"
load="$target/release/examples/grpc_load"
sink_bin="$target/release/examples/otlp_sink"

# --- the receiver: a coprocess, a line in asks for the count --------------------
coproc SINK { "$sink_bin"; }
sink_pid=$SINK_PID
pids+=("$sink_pid")
read -r _ sink_grpc <&"${SINK[0]}"
read -r _ _ <&"${SINK[0]}"
# spans_received: the sink's count so far.
spans_received() { echo >&"${SINK[1]}"; local _w n; read -r _w n <&"${SINK[0]}"; echo "$n"; }

# --- the three servers ------------------------------------------------------------
printf '[store]\ntimeout = "50ms"\non_error = "allow"\n' >"$work/t.toml"
# --http too: start_tollgate waits for an http:// address (the API stays idle).
serve=(--config "$work/t.toml" --store memory --http 127.0.0.1:0 --grpc 127.0.0.1:0 --envoy-config bench/grpc/rls.yaml)

start_tollgate off "${serve[@]}"
off_pid=$pid off_grpc=$(grpc_addr "$work/off.log")
traced_env=(OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_PROTOCOL=grpc
  "OTEL_EXPORTER_OTLP_ENDPOINT=$sink_grpc" OTEL_TRACES_SAMPLER=parentbased_traceidratio
  OTEL_BSP_SCHEDULE_DELAY=200 OTEL_BSP_MAX_QUEUE_SIZE=65536)
BIN="env" start_tollgate one "${traced_env[@]}" OTEL_TRACES_SAMPLER_ARG=0.01 "$tollgate" serve "${serve[@]}"
one_pid=$pid one_grpc=$(grpc_addr "$work/one.log")
BIN="env" start_tollgate all "${traced_env[@]}" OTEL_TRACES_SAMPLER_ARG=1 "$tollgate" serve "${serve[@]}"
all_pid=$pid all_grpc=$(grpc_addr "$work/all.log")
for f in one all; do
  grep -q 'tracing: spans over OTLP/gRPC' "$work/$f.log" || { cat "$work/$f.log" >&2; die "tracing not on in $f"; }
done

# --- measuring -----------------------------------------------------------------------
measure_grpc() { # ID LABEL ADDR DOMAIN KEYS
  benchstat run --results "$results" --id "$1" --round "$round" --label "$2" --quiet \
    --sut "${sut[*]}" --aux "${aux[*]}" --parse grpc-load --out "$work/grpc-$1.$round.txt" -- \
    timeout $((secs + 30)) "$load" "$3" "$conc" "$secs" "$5" "$4" 0
}
scenarios=("open.1 bench 1 admitted hot key" "open.10000 bench 10000 admitted 10k keys")
measure_scenario() { # ID DOMAIN KEYS WHAT
  local id=$1 domain=$2 keys=$3 what=$4
  sut=("$off_pid") aux=()
  measure_grpc "off.$id" "tracing off, $what" "$off_grpc" "$domain" "$keys"
  sut=("$one_pid") aux=("$sink_pid")
  measure_grpc "one.$id" "tracing 1%, $what" "$one_grpc" "$domain" "$keys"
  sut=("$all_pid") aux=("$sink_pid")
  measure_grpc "all.$id" "tracing 100%, $what" "$all_grpc" "$domain" "$keys"
}

all="$work/results"
attempt="$work/attempt"
for ((round = 1; round <= rounds; round++)); do
  for sc in "${scenarios[@]}"; do
    read -r id domain keys what <<<"$sc"
    if ((round == 1)); then # warm-up, not counted
      for a in "$off_grpc" "$one_grpc" "$all_grpc"; do
        timeout 31 "$load" "$a" "$conc" 1 "$keys" "$domain" 0 >/dev/null
      done
    fi
    results=$attempt
    for ((try = 1; ; try++)); do
      measure_scenario "$id" "$domain" "$keys" "$what"
      rc=0
      benchstat settle --attempt "$attempt" --results "$all" --try "$try" --what "round $round, $what" || rc=$?
      ((rc == 0)) && break
      ((rc == 3)) || die "benchstat settle failed"
    done
  done
done
results=$all
# The last batch goes within the schedule delay; then count what arrived.
sleep 1
received=$(spans_received)

# --- report ---------------------------------------------------------------------------
{
  echo "bench/tracing.sh $secs $conc $rounds: $conc callers over one HTTP/2 connection (grpc_load), ${secs}s per run, $rounds round(s), medians over rounds; $(nproc) cores shared with the load generator and the receiver"
  echo "tollgate $(tree); $(date -u +%Y-%m-%dT%H:%MZ); load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  benchstat table "$results" --label 'tracing, scenario' --col calls/s rps 0 --col 'p50 ms' p50 3 \
    --col 'p99 ms' p99 3 --col 'srv us/c' srv 2 --range '(min..max)' srv 2 \
    --col 'sink us/c' aux 2 --col other other 0%
  echo
  benchstat ratios "$results" --field srv --title 'server CPU per call, median per-round ratio' \
    --col 'admitted hot key' .open.1 --col 'admitted 10k keys' .open.10000 \
    --row 'tracing 1% / off' 'one{} / off{}' '' \
    --row 'tracing 100% / off' 'all{} / off{}' ''
  echo
  echo "spans received by the sink over the whole run (warm-up included): $received"
  echo "srv us/c: CPU the server used per call (utime+stime from /proc/PID/stat over the run / calls);"
  echo "  sink us/c: the receiver's, per call of the traced server; other: other processes' share of the cores."
} | tee "$out_file"
