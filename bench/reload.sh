#!/usr/bin/env bash
# What a config reload costs under load (docs/operations.md): tollgate
# serve on the memory store, wrk (2 threads, 64 connections) sending
# POST /v1/check for SECONDS, once without reloads and once with a SIGHUP
# every INTERVAL ms (the config alternating between two limits of the
# checked rule, so every reload really swaps). Prints req/s, p50, p99 and
# max check latency of both runs, and the time each reload took to load,
# validate, build and swap (from the server's "swapped in" log lines):
# median and max.
#
# Usage: bench/reload.sh [SECONDS, default 10] [INTERVAL ms, default 100]
# Env:   TOLLGATE=path/to/tollgate uses that binary instead of building the
#        release one (e.g. target/debug/tollgate: slower, say so with the
#        figures).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
secs="${1:-10}"
interval="${2:-100}"
[[ "$secs" =~ ^[0-9]+$ && "$interval" =~ ^[0-9]+$ ]] && ((secs >= 1 && secs <= 300 && interval >= 10)) ||
  { echo "usage: bench/reload.sh [SECONDS 1..300] [INTERVAL ms >= 10]" >&2; exit 2; }
command -v wrk >/dev/null || { echo "wrk is needed: sudo apt-get install wrk" >&2; exit 1; }
if [[ -z "${TOLLGATE:-}" ]]; then
  cargo build --release -q -p tollgate-server --bin tollgate
  TOLLGATE="$root/target/release/tollgate"
fi
work=$(mktemp -d)
pid=""
cleanup() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

config() { # LIMIT
  sed "s/^limit = 1000000$/limit = $1/" bench/http/rules.toml
}
config 1000000 > "$work/tollgate.toml"
"$TOLLGATE" serve --config "$work/tollgate.toml" --http 127.0.0.1:0 --reload-poll 0s 2> "$work/log" &
pid=$!
for _ in $(seq 100); do
  addr=$(grep -o 'HTTP API listening on http://[0-9.:]*' "$work/log" | sed 's|.*http://||' || true)
  [[ -n "$addr" ]] && break
  sleep 0.1
done
[[ -n "$addr" ]] || { cat "$work/log" >&2; exit 1; }

run() { # NAME
  timeout $((secs + 30)) wrk -t2 -c64 -d"${secs}s" --latency -s bench/http/check.lua \
    "http://$addr/v1/check" -- tollgate open 10000 > "$work/$1.wrk"
}
summary() { # NAME
  local f="$work/$1.wrk"
  printf '%-16s %10s req/s  p50 %8s  p99 %8s  max %8s  non-2xx %s\n' "$1" \
    "$(awk '/Requests\/sec/ {print $2}' "$f")" \
    "$(awk '$1 == "50%" {print $2}' "$f")" \
    "$(awk '$1 == "99%" {print $2}' "$f")" \
    "$(awk '$1 == "Latency" {print $4; exit}' "$f")" \
    "$(awk '/Non-2xx/ {print $NF}' "$f" | grep . || echo 0)"
}

run steady
reloads_before=$(grep -c 'config reloaded' "$work/log" || true)
(
  n=0
  end=$((SECONDS + secs))
  while ((SECONDS < end)); do
    n=$((n + 1))
    config $((999999 + n % 2)) > "$work/next.toml"
    mv "$work/next.toml" "$work/tollgate.toml"
    kill -HUP "$pid"
    sleep "$(awk "BEGIN {print $interval / 1000}")"
  done
) &
hup=$!
run reloading
wait "$hup"
sleep 0.5
echo "tollgate: $TOLLGATE; $secs s per run; SIGHUP every $interval ms during the second run"
summary steady
summary reloading
grep -o 'swapped in [0-9.]*[µm]*s' "$work/log" | awk '{
  v = $3; u = v; sub(/[0-9.]+/, "", u); sub(/[a-zµ]+$/, "", v);
  ms = (u == "s") ? v * 1000 : (u == "ms") ? v : v / 1000; print ms }' | sort -n |
  awk -v before="$reloads_before" '{ a[NR] = $1 } END {
    if (NR == 0) { print "no reload logged"; exit 1 }
    printf "reloads: %d, swap time median %.3f ms, max %.3f ms\n", NR - before, a[int((NR + 1) / 2)], a[NR] }'
if grep -q 'refused' "$work/log"; then echo "some reloads were refused:" >&2; grep refused "$work/log" | head -3 >&2; exit 1; fi
