#!/usr/bin/env bash
# The reverse proxy as an LLM gateway, against nginx as the same kind of
# proxy, in ONE run on this machine (bench/llm.md): issue 40's performance
# goal. One LLM-shaped upstream (bench/tools/sse_stream.rs: HTTP/1.1, a
# chat completion as JSON, or streamed as server-sent events: the head and
# a first chunk at once, then BENCH_EVENTS chunks one every
# BENCH_INTERVAL_MS), started twice: plain, and over TLS with a test CA
# made here (openssl). In front of each, `tollgate serve --proxy` with
# bench/http/proxy.toml's rule (keyed by x-key, admits everything) and nginx
# (bench/llm/nginx-proxy.conf.in: limit_req by x-key, keep-alive upstream
# pool, proxy_pass https:// verifying the upstream's certificate, sessions
# reused, proxy_buffering off). Clients speak plain HTTP/1.1 to the proxies
# and the upstream's own scheme to it directly. For each upstream (plain,
# TLS), each target (direct, tollgate's proxy, nginx's proxy):
#
#   1. load: oha at a FIXED rate (BENCH_RATE, default 1000 requests/s) over
#      64 connections for SECONDS, latency corrected for coordinated
#      omission, each request a JSON chat completion: p50/p99, and the CPU
#      the server under test spent per request (bench/lib/common.sh's
#      measure_rate, benchstat's /proc figures);
#   2. streams: bench/tools/sse_stream.rs's client, BENCH_STREAMS streamed
#      answers over BENCH_STREAM_CONC keep-alive connections (after one
#      uncounted warm-up answer each, started a C-th of an answer apart):
#      the time to the head and to the first byte of the body, p50/p90/p99.
#
# It prints the tables, then tollgate's CPU per request over nginx's, the
# latency each proxy adds to the upstream's own (p50, p99), and the time to
# first byte through each proxy less direct (goal: tollgate p99 within 1
# ms), and the commands it ran; the report also goes to bench/llm-results.txt.
# A peer that is missing is "skipped", not a failure: nginx, and tollgate's
# https upstream where this tree has none (issue 40 part A).
#
# Everything listens on 127.0.0.1; every process started here is stopped on
# exit; each run is bounded by a timeout.
#
# Usage: bench/llm.sh [SECONDS per load run, default 10] [ROUNDS, default 1]
# Env:   BENCH_RATE=1000 (requests/s of the load runs); BENCH_STREAMS=1000,
#        BENCH_STREAM_CONC=16, BENCH_EVENTS=20, BENCH_INTERVAL_MS=20 (the
#        streams); BENCH_RESULTS=FILE (default bench/llm-results.txt);
#        BENCH_KEEP=DIR keeps the raw output and the servers' logs;
#        BENCH_QUIET_BUSY / BENCH_QUIET_WAIT as for bench/http.sh.
set -euo pipefail
secs="${1:-10}"
rounds="${2:-1}"
[[ "$secs" =~ ^[0-9]+$ && "$rounds" =~ ^[0-9]+$ ]] && ((secs >= 1 && secs <= 300 && rounds >= 1 && rounds <= 10)) ||
  { echo "usage: bench/llm.sh [SECONDS per load run, 1..300] [ROUNDS, 1..10]" >&2; exit 2; }
conns=64
rate="${BENCH_RATE:-1000}"
streams="${BENCH_STREAMS:-1000}"
sconc="${BENCH_STREAM_CONC:-16}"
events="${BENCH_EVENTS:-20}"
interval="${BENCH_INTERVAL_MS:-20}"
for v in rate streams sconc events interval; do
  [[ "${!v}" =~ ^[0-9]+$ ]] && ((${!v} <= 1000000)) || { echo "bench/llm.sh: $v must be a count" >&2; exit 2; }
done
((rate >= 1 && streams >= 1 && sconc >= 1)) || { echo "bench/llm.sh: BENCH_RATE, BENCH_STREAMS and BENCH_STREAM_CONC must be >= 1" >&2; exit 2; }

# log, die, need_pkg, need_oha, stop, free_port, wait_http, start_tollgate,
# measure_rate (oha), cmdlog, benchstat: shared with the other scripts.
source "$(dirname "$0")/lib/common.sh"
out_file="${BENCH_RESULTS:-$root/bench/llm-results.txt}"
need_pkg curl curl
need_pkg ss iproute2
need_pkg openssl openssl
# nginx is the peer: skipped, not fatal, when it is not there.
command -v nginx >/dev/null || (need_pkg nginx nginx-light) || true
have_nginx=$(command -v nginx || true)
need_oha

log "building tollgate and sse_stream (release)"
cargo build --release -q -p tollgate-server --bin tollgate --example sse_stream
tollgate="$target/release/tollgate"
sse="$target/release/examples/sse_stream"

results="$work/results"
skipped=() # what was not measured, and why
round=0
sut=() aux=()

# ---------------------------------------------------------------- a test CA
# A CA and a server certificate for localhost and 127.0.0.1 signed by it.
tls="$work/tls"
mkdir -p "$tls"
ossl() { cmdlog openssl "$@"; openssl "$@" 2>>"$tls/openssl.log" >/dev/null; }
ossl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=tollgate bench CA" \
  -keyout "$tls/ca.key" -out "$tls/ca.pem"
ossl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$tls/server.key" -out "$tls/server.csr"
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$tls/ext.cnf"
ossl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial -days 2 \
  -extfile "$tls/ext.cnf" -out "$tls/server.pem"

# ---------------------------------------------------------------- the servers
# start NAME ARGS...: start_tollgate, with the command noted.
start() {
  local name=$1; shift
  if [[ -n "${BIN:-}" ]]; then cmdlog "$BIN" "$@"; else cmdlog "$tollgate" serve "$@"; fi
  start_tollgate "$name" "$@"
}
shape=(--events "$events" --interval-ms "$interval")
BIN="$sse" start up-plain serve 127.0.0.1:0 "${shape[@]}"
up_pid_p=$pid up_p="http://$addr"
BIN="$sse" start up-tls serve 127.0.0.1:0 --cert "$tls/server.pem" --key "$tls/server.key" "${shape[@]}"
up_pid_t=$pid up_t="https://$addr"
up_port_p=${up_p##*:} up_port_t=${up_t##*:}
curl -sf --max-time 2 "$up_p/v1/chat/completions" | grep -q '"usage"' || die "the plain upstream does not answer"
curl -sf --max-time 2 --cacert "$tls/ca.pem" "$up_t/v1/chat/completions" | grep -q '"usage"' ||
  die "the TLS upstream does not answer over TLS with the test CA"

# tollgate's proxy: bench/http/proxy.toml's rule; over TLS, plus
# [proxy.upstream_tls] (issue 40 part A; checked with `validate` first).
start proxy-plain --config bench/http/proxy.toml --proxy 127.0.0.1:0 --upstream "$up_p"
tg_pid_p=$pid tg_p="http://$addr"
{ cat bench/http/proxy.toml; printf '\n[proxy.upstream_tls]\nca_file = "%s"\nserver_name = "localhost"\n' "$tls/ca.pem"; } \
  >"$work/proxy-tls.toml"
tg_pid_t='' tg_t=''
tls_upstream="https://127.0.0.1:$up_port_t"
if why=$("$tollgate" validate --config "$work/proxy-tls.toml" --upstream "$tls_upstream" 2>&1); then
  start proxy-tls --config "$work/proxy-tls.toml" --proxy 127.0.0.1:0 --upstream "$tls_upstream"
  tg_pid_t=$pid tg_t="http://$addr"
else
  skipped+=("tollgate's proxy to the TLS upstream: this tree has no https upstreams (issue 40 part A, branch tls, not merged?): $(echo "$why" | tr '\n' ' ' | cut -c1-300)")
fi

# nginx's proxy, in front of each upstream.
ng_pid_p='' ng_p='' ng_pid_t='' ng_t=''
start_nginx() { # NAME SCHEME UPSTREAM-PORT: sets $pid, $addr
  local dir="$work/$1" port
  port=$(free_port)
  mkdir -p "$dir"
  sed -e "s|@DIR@|$dir|g" -e "s|@PORT@|$port|g" -e "s|@UPSTREAM@|$3|g" -e "s|@SCHEME@|$2|g" \
    -e "s|@CA@|$tls/ca.pem|g" bench/llm/nginx-proxy.conf.in >"$dir/nginx.conf"
  cmdlog nginx -e "$dir/nginx-error.log" -p "$dir" -c "$dir/nginx.conf"
  nginx -e "$dir/nginx-error.log" -p "$dir" -c "$dir/nginx.conf" &
  pid=$!
  pids+=("$pid")
  addr="127.0.0.1:$port"
  wait_http "http://$addr/v1/chat/completions"
}
if [[ -n "$have_nginx" ]]; then
  start_nginx nginx-plain http "$up_port_p"
  ng_pid_p=$pid ng_p="http://$addr"
  start_nginx nginx-tls https "$up_port_t"
  ng_pid_t=$pid ng_t="http://$addr"
else
  skipped+=("nginx's proxy: nginx is not installed (apt-get install nginx-light)")
fi

# Every proxy answers a stream whole before anything is measured.
ev=$((events + 3))
for u in "$tg_p" "$tg_t" "$ng_p" "$ng_t"; do
  [[ -n "$u" ]] || continue
  got=$(curl -sN --max-time 10 -H 'x-key: probe' "$u/v1/stream" | grep -c '^data: ' || true)
  ((got == ev)) || die "$u/v1/stream: $got events, expected $ev"
done

# ---------------------------------------------------------------- the runs
# ttfb ID LABEL URL [CLIENT-ARGS...]: one sse_stream client run of round
# $round, recorded with the CPU of sut and aux; best round: lowest p99.
stream_secs=$(( (streams / sconc + 2) * (events * interval + 50) / 1000 * 3 + 30 ))
ttfb() {
  local id=$1 label=$2 url=$3; shift 3
  local cmd=("$sse" client "$url" --requests "$streams" --concurrency "$sconc" --expect-events "$ev" "$@")
  cmdlog "${cmd[@]}"
  benchstat run --results "$results" --id "$id" --round "$round" --label "$label" --quiet \
    --sut "${sut[*]}" --aux "${aux[*]}" --parse kv --set best=-p99 --out "$work/ttfb-$id.$round.txt" -- \
    timeout "$stream_secs" "${cmd[@]}"
}

# measure_target ID LABEL URL SUT-PID AUX-PID: both runs of one target.
measure_target() {
  local id=$1 label=$2 url=$3
  sut=("$4") aux=()
  if [[ -n "$5" ]]; then aux=("$5"); fi
  local oha_tls=() sse_tls=()
  [[ "$url" == https:* ]] && oha_tls=(--cacert "$tls/ca.pem") sse_tls=(--ca "$tls/ca.pem")
  measure_rate "$id" "$label" "$url/v1/chat/completions" "${oha_tls[@]}"
  ttfb "ttfb.$id" "$label" "$url/v1/stream" "${sse_tls[@]}"
}

one_round() {
  local m
  for m in p t; do
    local up_name=plain up_pid_v="up_pid_$m" up_v="up_$m" tg_v="tg_$m" tgp_v="tg_pid_$m" ng_v="ng_$m" ngp_v="ng_pid_$m"
    [[ $m == t ]] && up_name=TLS
    measure_target "direct.$m" "direct, $up_name upstream" "${!up_v}" "${!up_pid_v}" ''
    if [[ -n "${!tg_v}" ]]; then
      measure_target "tg.$m" "tollgate -> $up_name upstream" "${!tg_v}" "${!tgp_v}" "${!up_pid_v}"
    fi
    if [[ -n "${!ng_v}" ]]; then
      measure_target "ng.$m" "nginx -> $up_name upstream" "${!ng_v}" "${!ngp_v}" "${!up_pid_v}"
    fi
  done
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((round = 1; round <= rounds; round++)); do one_round; done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------- the report
report() {
  local of=best title='best round per target' cols=(--col 'plain upstream' .p --col 'TLS upstream' .t)
  echo "bench/llm.sh $secs $rounds: load at $rate req/s over $conns connections (oha), ${secs}s per target;" \
    "$streams streams over $sconc connections per target, 1 + $events chunks ${interval} ms apart + usage + [DONE]; $rounds round(s)$( ((rounds > 1)) && echo ", $title"); $(nproc) cores shared by the clients and the servers"
  local ngv=skipped
  [[ -z "$have_nginx" ]] || ngv=$(nginx -v 2>&1 | grep -o '[0-9.]*$')
  echo "tollgate $(tree); nginx $ngv; $(date -u +%Y-%m-%dT%H:%MZ); load average before $load_before, after $load_after"
  echo
  benchstat table "$results" --of "$of" --ids 'direct.* tg.* ng.*' --label 'load, JSON answers' \
    --col 'req/s' rps 0 --col 'p50 ms' p50 3 --col 'p99 ms' p99 3 --col non2xx non2xx 1% \
    --col 'srv us/r' srv 2 --col 'aux us/r' aux 2 --col 'oha us/r' load 2 --col other other 0% --col steal steal 0%
  echo
  benchstat table "$results" --of "$of" --ids 'ttfb.*' --label 'streams, ms' \
    --col 'streams/s' rps 1 --col 'head p50' head_p50 3 --col 'head p99' head_p99 3 \
    --col 'first byte p50' p50 3 --col p90 p90 3 --col p99 p99 3 --col max max 3 \
    --col 'whole p50' total_p50 1 --col bad bad 0 --col 'srv us/stream' srv 1 --col other other 0%
  local pass
  for pass in best rounds; do
    [[ $pass == rounds ]] && { ((rounds > 1)) || break; title='median of per-round ratios'; }
    echo
    benchstat ratios "$results" --of "$pass" --field srv --title "server CPU per request at $rate/s, $title" "${cols[@]}" \
      --row 'tollgate proxy / nginx proxy' 'tg{} / ng{}' - \
      --row 'tollgate proxy / upstream (direct)' 'tg{} / direct{}' - \
      --row 'nginx proxy / upstream (direct)' 'ng{} / direct{}' -
    echo
    benchstat ratios "$results" --of "$pass" --field p99 --fmt 3 --title "latency added at $rate/s (ms), $title" "${cols[@]}" \
      --row 'p50, tollgate proxy - direct' 'tg{}:p50 - direct{}:p50' - \
      --row 'p50, nginx proxy - direct' 'ng{}:p50 - direct{}:p50' - \
      --row 'p99, tollgate proxy - direct' 'tg{} - direct{}' - \
      --row 'p99, nginx proxy - direct' 'ng{} - direct{}' -
    echo
    benchstat ratios "$results" --of "$pass" --field p99 --fmt 3 --title "time to first byte of a stream, added (ms), $title" "${cols[@]}" \
      --row 'p50, tollgate proxy - direct' 'ttfb.tg{}:p50 - ttfb.direct{}:p50' - \
      --row 'p50, nginx proxy - direct' 'ttfb.ng{}:p50 - ttfb.direct{}:p50' - \
      --row 'p99, tollgate proxy - direct' 'ttfb.tg{} - ttfb.direct{}' '<=1' \
      --row 'p99, nginx proxy - direct' 'ttfb.ng{} - ttfb.direct{}' -
  done
  cat <<'EOF'

load rows: oha at a fixed rate, latency corrected; srv us/r: CPU of the server under test (the
  upstream for "direct", else the proxy) per request, from /proc; aux us/r: the upstream's, behind
  a proxy; other/steal: share of the cores other processes / the hypervisor took meanwhile.
streams rows (ms): head = time to the response head, first byte = to the first byte of the body
  (the upstream sends both at once), whole = the whole answer; srv us/stream: CPU per answer.
Clients speak plain HTTP/1.1 to the proxies, and the upstream's own scheme to it directly.
EOF
  local s
  for s in "${skipped[@]}"; do echo "skipped: $s"; done
  echo
  echo "commands (ports are this run's; \$work is its scratch folder):"
  awk '!seen[$0]++ { print "  " $0 }' "$work/commands.txt"
}
report | tee "$out_file"
