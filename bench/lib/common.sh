# Sourced by every bench script: the processes it starts (all stopped on
# exit), its scratch folder, and benchstat (bench/tools/benchstat), which
# does every statistic: the scripts only start and stop servers and load
# tools. Sets $root (the repository, also the working directory), $target
# (cargo's target folder), $work, pids=(), $keep (BENCH_KEEP: a folder that
# gets $work's files on exit).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}
[[ $target == /* ]] || target=$root/$target

log() { echo "# $*" >&2; }
die() { echo "bench/${0##*/}: $*" >&2; exit 1; }

apt_updated=
need_pkg() { # COMMAND PACKAGE
  command -v "$1" >/dev/null && return
  log "installing $2 (apt-get)"
  if [[ -z "$apt_updated" ]]; then apt-get update -qq >/dev/null; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
  command -v "$1" >/dev/null || die "$2 did not install $1"
}

cargo build --release -q -p benchstat
benchstat() { "$target/release/benchstat" "$@"; }

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

# stop PID: ends one process started here and waits for it (5 s, then KILL).
stop() {
  local pid=$1 p rest=()
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  for p in "${pids[@]}"; do [[ "$p" == "$pid" ]] || rest+=("$p"); done
  pids=("${rest[@]}")
}

# A loopback port no socket uses, below the ephemeral range (so no client
# connection can take it meanwhile). tollgate itself binds port 0.
free_port() {
  local p lo
  lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  for _ in $(seq 100); do
    p=$((10000 + RANDOM % (lo - 10000)))
    [[ -z "$(ss -Htan "sport = :$p")" ]] && { echo "$p"; return; }
  done
  die "no free port"
}

# wait_http URL: until URL answers 200 (10 s at most).
wait_http() {
  local code
  for _ in $(seq 100); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$1" || true)
    [[ "$code" == 200 ]] && return 0
    sleep 0.1
  done
  die "$1 not ready (last status ${code:-none})"
}

# start_tollgate NAME ARGS...: runs `$tollgate serve ARGS` (or, with
# BIN=PATH, `PATH ARGS`), logging to $work/NAME.log; sets $pid and $addr,
# the address of the first door it logs, http:// or https:// (60 s at
# most: valgrind is slow).
start_tollgate() {
  local name=$1; shift
  if [[ -n "${BIN:-}" ]]; then "$BIN" "$@" >"$work/$name.log" 2>&1 &
  else "$tollgate" serve "$@" >"$work/$name.log" 2>&1 &
  fi
  pid=$!
  pids+=("$pid")
  addr=
  for _ in $(seq 600); do
    addr=$(grep -o 'listening on https\?://[0-9.:]*' "$work/$name.log" | head -1 | sed 's|.*://||' || true)
    [[ -n "$addr" ]] && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$work/$name.log" >&2; die "tollgate ($name) exited"; }
    sleep 0.1
  done
  cat "$work/$name.log" >&2
  die "tollgate ($name) logged no address"
}

# grpc_addr LOG: the gRPC address tollgate logged (5 s at most: it may
# come a moment after the HTTP door's).
grpc_addr() {
  local a
  for _ in $(seq 50); do
    a=$(grep -o 'gRPC) listening on [0-9.:]*' "$1" | head -1 | sed 's|.* ||' || true)
    [[ -n "$a" ]] && { echo "$a"; return; }
    sleep 0.1
  done
}

# start_redis [NAME]: a throwaway redis-server on a free port, without
# persistence; sets $redis_port and $redis_pid. Extra redis-server
# arguments: the array redis_args.
start_redis() {
  local dir="$work/${1:-redis}"
  need_pkg redis-server redis-server
  need_pkg redis-cli redis-tools
  redis_port=$(free_port)
  mkdir -p "$dir"
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$dir" --daemonize no --logfile "$dir/log" &
  redis_pid=$!
  pids+=("$redis_pid")
  for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "redis-server did not answer on port $redis_port (log: $dir/log)"
}

# script_calls PORT: `CALLS USEC` of the script runs redis-server counted
# since its last CONFIG RESETSTAT.
script_calls() {
  redis-cli -p "$1" info commandstats | benchstat commandstats eval evalsha fcall fcall_ro
}

# measure ID LABEL URL SCRIPT CONNECTIONS -- SCRIPT-ARGS...: one wrk run
# (bench/http/SCRIPT, $threads threads, $secs seconds) of round $round,
# after a quiet machine; its record goes to $results with the CPU of the
# processes in the arrays sut (the server under test) and aux (what it
# leans on: redis-server, the proxy's upstream).
measure() {
  local id=$1 label=$2 url=$3 script=$4 c=$5; shift 6
  local t=$threads
  ((c < t)) && t=$c
  benchstat run --results "$results" --id "$id" --round "$round" --label "$label" --quiet \
    --sut "${sut[*]}" --aux "${aux[*]}" --parse wrk --out "$work/wrk-$id.$round.txt" -- \
    timeout $((secs + 30)) wrk -t"$t" -c"$c" -d"${secs}s" --latency --timeout 2s \
    -s "$root/bench/http/$script" "$url" -- "$@"
}

# cmdlog COMMAND ARGS...: notes a command a script ran (quoted, one a
# line) in $work/commands.txt, for its report to print. Paths are written
# as on any machine: target/ (or $CARGO_TARGET_DIR), $work, and the
# repository's files relative to it, a program installed elsewhere (envoy
# from its wheel) by its name.
cmdlog() {
  local line shown_target=target program=$1
  shift
  [[ $target == "$root/target" ]] || shown_target='$CARGO_TARGET_DIR'
  [[ $program == /* && $program != "$target"/* && $program != "$root"/* ]] && program=${program##*/}
  line=$(printf '%q ' "$program" "$@" | sed 's/ $//')
  line=${line//"$target"/$shown_target}
  line=${line//"$work"/'$work'}
  line=${line//"$root/"/}
  echo "$line" >>"$work/commands.txt"
}

# need_oha: sets $oha_bin, oha 1.16 (the fixed-rate load generator),
# installed into $target/bench-tools by cargo the first time.
need_oha() {
  local tools="$target/bench-tools"
  oha_bin="$tools/bin/oha"
  [[ -x "$oha_bin" ]] && return
  # oha 1.16 does not build without a TLS backend; native-tls needs OpenSSL.
  need_pkg pkg-config pkg-config
  dpkg -s libssl-dev >/dev/null 2>&1 || { log "installing libssl-dev (apt-get)"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libssl-dev >/dev/null; }
  log "installing oha 1.16 into $tools (cargo install)"
  cargo install -q --locked --root "$tools" oha --version '~1.16' --no-default-features --features native-tls
}

# measure_rate ID LABEL URL [OHA-ARGS...]: one oha run (need_oha) at the
# fixed rate $rate over $conns connections for $secs s, in round $round
# (every request sends `x-key: k1`, which the proxies' rules key on),
# latency corrected for coordinated omission (measured from when each
# request was due, not from when it could be sent); its record goes to
# $results with the CPU of the arrays sut and aux, as measure's; its best
# round is the one with the lowest p99 (its req/s is the rate), its "wrk"
# column oha's CPU.
measure_rate() {
  local id=$1 label=$2 url=$3; shift 3
  cmdlog "$oha_bin" -z "${secs}s" -c "$conns" -q "$rate" --latency-correction \
    --no-tui --output-format json -H 'x-key: k1' "$@" "$url"
  benchstat run --results "$results" --id "$id" --round "$round" --label "$label" --quiet \
    --sut "${sut[*]}" --aux "${aux[*]}" --parse oha --set best=-p99 --out "$work/oha-$id.$round.json" -- \
    timeout $((secs + 30)) "$oha_bin" -z "${secs}s" -c "$conns" -q "$rate" --latency-correction \
    --no-tui --output-format json -H 'x-key: k1' "$@" "$url"
}

# tree: this tree's commit, and whether crates/ has uncommitted changes.
tree() {
  echo "$(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- crates 2>/dev/null || echo ' (+ uncommitted changes in crates/)')"
}
