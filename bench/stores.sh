#!/usr/bin/env bash
# What the shared counter costs: `POST /v1/check` on `tollgate serve` over
# the memory store, a local redis-server, and the hybrid store on that
# redis-server, measured in ONE run with wrk (2 threads, 64 connections, N
# seconds per target, on the same 2 cores as the servers), each for an
# admitted rule ("open") and a denied one ("closed"), one hot key and 10k
# random keys (bench/http/rules.toml, bench/http/check.lua).
#
# For every row it prints the CPU per check of tollgate and of
# redis-server separately (utime + stime from /proc; "(sys)": the stime
# part, the kernel's: sockets and wake-ups), their sum, the Redis
# calls per check (script calls counted by redis-server's INFO
# commandstats, divided by the checks wrk made), and the ratio the issue's
# goal is about: (tollgate + redis-server CPU) / the memory store's CPU,
# per row. With ROUNDS > 1 the rounds are interleaved and each ratio is the
# median of the per-round ratios (both sides minutes apart in one round).
#
# Each round also measures a FLOOR per row: what one check costs when it
# reaches Redis as the cheapest native command that does that row's part
# of the work, with no script, no decision and no HTTP: redis-benchmark (a
# C client) pipelining 32 at a time on 2 connections (tollgate's batches
# are ~30). Hot key, admitted or denied: `GET` of one key (a read-only
# command: less than any check, which also records what it admits).
# 10k keys, admitted: `SET key v NX PX 1 GET` over 10k keys (each admitted
# check creates its key, which lives until its TAT, 1 µs here:
# docs/semantics.md); denied: `GET` over 10k existing keys. It prints the
# CPU a command of redis-server and of the client, and (memory + both) /
# memory: a Redis path cannot cost less than that ratio, whatever its
# scripts and client do. benchstat does the counting and the statistics
# (bench/lib/common.sh).
#
# Usage: bench/stores.sh [SECONDS per target, default 5] [ROUNDS, default 3]
# Env:   BENCH_KEEP=DIR keeps wrk's output and the servers' logs in DIR;
#        BENCH_QUIET_BUSY / BENCH_QUIET_WAIT as in bench/http.sh;
#        BENCH_BASE=COMMIT also measures the Redis rows with `tollgate` built
#        at COMMIT (once, into target/bench-ab/COMMIT), in the same rounds
#        ("base" rows: its own scripts and connection).
set -euo pipefail
secs="${1:-5}"
rounds="${2:-3}"
[[ "$secs" =~ ^[0-9]+$ && "$rounds" =~ ^[0-9]+$ ]] && ((secs >= 1 && secs <= 300 && rounds >= 1 && rounds <= 10)) ||
  { echo "usage: bench/stores.sh [SECONDS per target, 1..300] [ROUNDS, 1..10]" >&2; exit 2; }
threads=2
conns=64
keys=10000

# log, die, need_pkg, stop, free_port, wait_http, start_tollgate,
# start_redis, script_calls, measure (wrk), benchstat: shared with the
# other scripts.
source "$(dirname "$0")/lib/common.sh"
need_pkg wrk wrk
need_pkg redis-benchmark redis-tools
need_pkg ss iproute2
need_pkg curl curl

log "building tollgate (release)"
cargo build --release -q -p tollgate-server --bin tollgate
tollgate="$target/release/tollgate"
base_bin=
if [[ -n "${BENCH_BASE:-}" ]]; then
  base_sha=$(git rev-parse --verify --short "$BENCH_BASE^{commit}") || die "no commit $BENCH_BASE"
  base_dir="$target/bench-ab/$base_sha"
  base_bin="$base_dir/target/release/tollgate"
  if [[ ! -x "$base_bin" ]]; then
    wt=$(mktemp -d)
    git worktree add -q --detach "$wt" "$base_sha"
    log "building tollgate at $base_sha (once; kept in $base_dir)"
    (cd "$wt" && CARGO_TARGET_DIR="$base_dir/target" cargo build --release -q -p tollgate-server --bin tollgate)
    git worktree remove --force "$wt"
  fi
fi

results="$work/results"
round=0
sut=()
aux=()
names=([1]='hot key' [$keys]="${keys} keys")
rows=(open.1 "open.$keys" closed.1 "closed.$keys")
label() { # ROW: "admitted, hot key"...
  echo "$([[ $1 == open.* ]] && echo admitted || echo denied), ${names[${1#*.}]}"
}

expect() { [[ "$2" == *"$3"* ]] || die "$1: expected $3, got: $2"; }
post_json() { curl -s --max-time 2 -H 'content-type: application/json' -d "$2" "$1"; }

# One store's 2x2 matrix; with a redis-server, its script calls per row.
matrix() { # ID-PREFIX NAME URL [REDIS-PORT]
  local row calls
  for row in "${rows[@]}"; do
    [[ -n "${4:-}" ]] && redis-cli -p "$4" config resetstat >/dev/null
    measure "$1.$row" "$(label "$row"): $2" "$3" check.lua "$conns" -- tollgate "${row%.*}" "${row#*.}"
    if [[ -n "${4:-}" ]]; then
      read -r calls _ < <(script_calls "$4")
      benchstat put "$results" "$1.$row" "$round" "calls=$calls"
    fi
  done
}

# The floor of each row (see the header): redis-benchmark's native
# command; the CPU a command of redis-server ("srv") and of the client
# ("load"), over the commands redis-server counted.
floor_rows() {
  local row cmd what n=$((secs * 400000)) count
  start_redis floor
  # the denied 10k-key row reads keys that exist (its checks are denied
  # because their keys hold a day's TAT)
  redis-benchmark -p "$redis_port" -c 2 -P 32 -r "$keys" -n $((keys * 20)) -q \
    SET 'tollgate-bench:{closed:=k__rand_int__}:gcra' 1765012345678901 PX 86400000 >/dev/null
  for row in "${rows[@]}"; do
    case $row in
      open.1 | closed.1) what='GET (one key)' cmd=(GET 'tollgate-bench:{hot:=probe}:gcra') ;;
      open.*) what="SET NX PX 1 GET ($keys keys)" cmd=(-r "$keys" SET 'tollgate-bench:{open:=k__rand_int__}:gcra' 1765012345678901 NX PX 1 GET) ;;
      closed.*) what="GET ($keys existing keys)" cmd=(-r "$keys" GET 'tollgate-bench:{closed:=k__rand_int__}:gcra') ;;
    esac
    redis-cli -p "$redis_port" config resetstat >/dev/null
    benchstat run --results "$results" --id "floor.$row" --round "$round" --label "$(label "$row"): $what" \
      --sut "$redis_pid" -- redis-benchmark -p "$redis_port" -c 2 -P 32 -n "$n" -q "${cmd[@]}"
    read -r count _ < <(redis-cli -p "$redis_port" info commandstats | benchstat commandstats get set)
    benchstat put "$results" "floor.$row" "$round" "n=$count"
  done
  stop "$redis_pid"
}

probe() { # NAME ADDR
  expect "$1 open" "$(post_json "http://$2/v1/check" '{"rule":"open","key":"probe"}')" '"allowed":true'
  for _ in 1 2; do post_json "http://$2/v1/check" '{"rule":"closed","key":"probe"}' >/dev/null; done
  expect "$1 closed" "$(post_json "http://$2/v1/check" '{"rule":"closed","key":"probe"}')" '"allowed":false'
}

one_round() {
  local tg
  start_tollgate memory --config bench/http/rules.toml --http 127.0.0.1:0 --store memory
  tg=$pid sut=("$pid") aux=()
  wait_http "http://$addr/healthz"
  probe memory "$addr"
  matrix mem "memory" "http://$addr"
  stop "$tg"
  floor_rows

  local store stores=(redis hybrid)
  [[ -n "$base_bin" ]] && stores+=(base)
  for store in "${stores[@]}"; do
    start_redis "$store"
    local config=bench/http/rules.toml
    if [[ "$store" == hybrid ]]; then
      # the same rules and [store], hybrid on (it needs the url in the file)
      config="$work/hybrid.toml"
      sed "s|^\\[store\\]\$|[store]\\nurl = \"redis://127.0.0.1:$redis_port\"\\nhybrid = true|" bench/http/rules.toml >"$config"
    fi
    if [[ "$store" == base ]]; then
      BIN="$base_bin" start_tollgate "$store" serve --config "$config" --http 127.0.0.1:0 --store "redis://127.0.0.1:$redis_port"
    else
      start_tollgate "$store" --config "$config" --http 127.0.0.1:0 --store "redis://127.0.0.1:$redis_port"
    fi
    tg=$pid sut=("$pid") aux=("$redis_pid")
    wait_http "http://$addr/readyz"
    probe "$store" "$addr"
    matrix "$store" "$([[ $store == base ]] && echo "Redis, base" || echo "$store")" "http://$addr" "$redis_port"
    if [[ "$store" == redis ]]; then
      redis-cli -p "$redis_port" info commandstats | tr -d '\r' |
        grep -E '^cmdstat_(evalsha|eval|fcall|fcall_ro):' >"$work/commandstats-$store.txt" || true
    fi
    if grep -q 'store trouble' "$work/$store.log"; then log "WARNING: tollgate logged store trouble ($store)"; fi
    local bare
    bare=$(redis-cli -p "$redis_port" eval "local n = 0
      for _, k in ipairs(redis.call('KEYS', '*')) do
        if redis.call('PTTL', k) == -1 then n = n + 1 end
      end
      return n" 0)
    [[ "$bare" == 0 ]] || die "$store left $bare keys without a TTL"
    stop "$tg"
    stop "$redis_pid"
  done
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((round = 1; round <= rounds; round++)); do one_round; done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "bench/stores.sh $secs $rounds: wrk -t$threads -c$conns -d${secs}s per target, $rounds round(s); $(nproc) cores shared by wrk and the servers"
echo "tollgate $(tree); redis $(redis-server --version | grep -o 'v=[0-9.]*' | cut -d= -f2); load average before $load_before, after $load_after"
echo
ids=()
for row in "${rows[@]}"; do ids+=("mem.$row" "redis.$row" "hybrid.$row" "base.$row"); done
benchstat table "$results" --ids "${ids[*]}" --label 'row: store (medians over rounds)' --col 'req/s' rps 0 \
  --col 'p99 ms' p99 2 --col 'tollgate us' srv 2 --col '(sys)' srv_sys 2 --col 'redis us' aux 2 \
  --col '(sys)' aux_sys 2 --col 'total us' 'srv + aux' 2 --col 'calls/check' 'calls / n' 4 --col other other 0%
echo
cols=(--col 'admitted, hot key' .open.1 --col 'admitted, 10k keys' ".open.$keys"
  --col 'denied, hot key' .closed.1 --col 'denied, 10k keys' ".closed.$keys")
base_rows=()
if [[ -n "$base_bin" ]]; then
  base_rows=(--row "base's Redis total CPU / memory" 'base{}:srv + base{}:aux / mem{}' -
    --row 'Redis total CPU, this tree / base' 'redis{}:srv + redis{}:aux / base{}:srv + base{}:aux' -)
fi
benchstat ratios "$results" --field srv --title 'CPU per check, median of per-round ratios' "${cols[@]}" \
  --row 'Redis total CPU / memory' 'redis{}:srv + redis{}:aux / mem{}' '<=1.15' \
  --row 'floor (one native command a check, C client) / memory' 'mem{} + floor{}:srv + floor{}:load / mem{}' - \
  --row 'hybrid total CPU / memory' 'hybrid{}:srv + hybrid{}:aux / mem{}' - "${base_rows[@]}"
echo
echo "Floor: one native command a check, redis-benchmark -c 2 -P 32 (medians over rounds):"
floor_ids=()
for row in "${rows[@]}"; do floor_ids+=("floor.$row"); done
benchstat table "$results" --ids "${floor_ids[*]}" --label 'row: command' --col 'redis-server us' srv 2 --col 'client us' load 2
echo
echo "total: tollgate's and redis-server's CPU per check (utime + stime from /proc; (sys): the"
echo "  kernel's part); calls/check: script calls redis-server counted per check; other: the share"
echo "  of the cores other processes took meanwhile."
if [[ -n "$base_bin" ]]; then
  echo "base: the Redis rows with tollgate built at $base_sha (its own scripts and connection), same rounds"
fi
if [[ -s "$work/commandstats-redis.txt" ]]; then
  echo "redis-server's script calls in the Redis rows (last round, last row's stats: $(paste -sd' ' "$work/commandstats-redis.txt"))"
fi
