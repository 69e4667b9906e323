#!/usr/bin/env bash
# What a config reload costs under load (docs/operations.md): tollgate
# serve on the memory store, wrk (2 threads, 64 connections) sending
# POST /v1/check for SECONDS, once without reloads and once with a SIGHUP
# every INTERVAL ms (the config alternating between two limits of the
# checked rule, so every reload really swaps). Prints req/s, p50, p99 and
# max check latency of both runs, and the time each reload took to load,
# validate, build and swap (from the server's "swapped in" log lines):
# median and max (benchstat: bench/lib/common.sh).
#
# Usage: bench/reload.sh [SECONDS, default 10] [INTERVAL ms, default 100]
# Env:   TOLLGATE=path/to/tollgate uses that binary instead of building the
#        release one (e.g. target/debug/tollgate: slower, say so with the
#        figures).
set -euo pipefail
secs="${1:-10}"
interval="${2:-100}"
[[ "$secs" =~ ^[0-9]+$ && "$interval" =~ ^[0-9]+$ ]] && ((secs >= 1 && secs <= 300 && interval >= 10)) ||
  { echo "usage: bench/reload.sh [SECONDS 1..300] [INTERVAL ms >= 10]" >&2; exit 2; }
source "$(dirname "$0")/lib/common.sh"
need_pkg wrk wrk
if [[ -z "${TOLLGATE:-}" ]]; then
  cargo build --release -q -p tollgate-server --bin tollgate
  TOLLGATE="$target/release/tollgate"
fi
tollgate=$TOLLGATE

config() { # LIMIT
  sed "s/^limit = 1000000$/limit = $1/" bench/http/rules.toml
}
config 1000000 >"$work/tollgate.toml"
start_tollgate serve --config "$work/tollgate.toml" --http 127.0.0.1:0 --reload-poll 0s
tg=$pid

results="$work/results"
run() { # ID LABEL
  benchstat run --results "$results" --id "$1" --round 1 --label "$2" --sut "$tg" --parse wrk \
    --out "$work/$1.wrk" -- timeout $((secs + 30)) wrk -t2 -c64 -d"${secs}s" --latency \
    -s bench/http/check.lua "http://$addr/v1/check" -- tollgate open 10000
}

run steady 'no reloads'
reloads_before=$(grep -c 'config reloaded' "$work/serve.log" || true)
(
  n=0
  end=$((SECONDS + secs))
  while ((SECONDS < end)); do
    n=$((n + 1))
    config $((999999 + n % 2)) >"$work/next.toml"
    mv "$work/next.toml" "$work/tollgate.toml"
    kill -HUP "$tg"
    sleep "$((interval / 1000)).$(printf '%03d' $((interval % 1000)))"
  done
) &
hup=$!
run reloading "SIGHUP every $interval ms"
wait "$hup"
sleep 0.5
echo "tollgate: $TOLLGATE; $secs s per run; SIGHUP every $interval ms during the second run"
benchstat table "$results" --label run --col 'req/s' rps 0 --col 'p50 ms' p50 3 --col 'p99 ms' p99 3 \
  --col 'max ms' max 3 --col non2xx non2xx 1% --col 'srv us/req' srv 2
read -r swaps median _ max < <(grep -o 'swapped in [0-9.]*[µm]*s' "$work/serve.log" | sed 's/swapped in //' | benchstat stats)
((swaps > 0)) || die "no reload logged"
printf 'reloads: %d, swap time median %.3f ms, max %.3f ms\n' $((swaps - reloads_before)) "$median" "$max"
if grep -q 'refused' "$work/serve.log"; then echo "some reloads were refused:" >&2; grep refused "$work/serve.log" | head -3 >&2; exit 1; fi
