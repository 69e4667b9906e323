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
# scripts and client do.
#
# Usage: bench/stores.sh [SECONDS per target, default 5] [ROUNDS, default 3]
# Env:   BENCH_KEEP=DIR keeps wrk's output and the servers' logs in DIR;
#        BENCH_QUIET_BUSY / BENCH_QUIET_WAIT as in bench/http.sh;
#        BENCH_BASE=COMMIT also measures the Redis rows with `tollgate` built
#        at COMMIT (once, into target/bench-ab/COMMIT), in the same rounds
#        ("base" rows: its own scripts and connection).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

secs="${1:-5}"
rounds="${2:-3}"
[[ "$secs" =~ ^[0-9]+$ && "$rounds" =~ ^[0-9]+$ ]] && ((secs >= 1 && secs <= 300 && rounds >= 1 && rounds <= 10)) ||
  { echo "usage: bench/stores.sh [SECONDS per target, 1..300] [ROUNDS, 1..10]" >&2; exit 2; }
threads=2
conns=64
keys=10000
hz=$(getconf CLK_TCK)

# log, die, need_pkg, stop, free_port, wait_http, start_tollgate, measure,
# proc_ticks/sys_ticks, cpu_begin/cpu_end/cpu_row, wait_quiet: shared with
# bench/http.sh.
source "$root/bench/lib/measure.sh"
need_pkg wrk wrk
need_pkg redis-server redis-server
need_pkg redis-cli redis-tools
need_pkg redis-benchmark redis-tools
need_pkg ss iproute2
need_pkg curl curl

log "building tollgate (release)"
cargo build --release -q -p tollgate-server --bin tollgate
tollgate="$root/target/release/tollgate"
base_bin=
if [[ -n "${BENCH_BASE:-}" ]]; then
  base_sha=$(git rev-parse --verify --short "$BENCH_BASE^{commit}") || die "no commit $BENCH_BASE"
  base_dir="$root/target/bench-ab/$base_sha"
  base_bin="$base_dir/target/release/tollgate"
  if [[ ! -x "$base_bin" ]]; then
    tree=$(mktemp -d)
    git worktree add -q --detach "$tree" "$base_sha"
    log "building tollgate at $base_sha (once; kept in $base_dir)"
    (cd "$tree" && CARGO_TARGET_DIR="$base_dir/target" cargo build --release -q -p tollgate-server --bin tollgate)
    git worktree remove --force "$tree"
  fi
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
calls="$work/calls" # id|round|script calls counted by redis-server|checks
: >"$calls"
sys="$work/sys" # id|round|system ticks of tollgate|of redis-server|checks
: >"$sys"
floor="$work/floor" # row|round|redis-server ticks (user+sys)|client ticks|commands
: >"$floor"
round=0
sut=()
aux=()


expect() { [[ "$2" == *"$3"* ]] || die "$1: expected $3, got: $2"; }
post_json() { curl -s --max-time 2 -H 'content-type: application/json' -d "$2" "$1"; }

# script_calls PORT: script runs redis-server counted since its last RESETSTAT.
script_calls() {
  redis-cli -p "$1" info commandstats | tr -d '\r' |
    sed -nE 's/^cmdstat_(eval|evalsha|fcall|fcall_ro):calls=([0-9]+),.*/\2/p' | awk '{ s += $1 } END { print s + 0 }'
}

start_redis_server() {
  redis_port=$(free_port)
  mkdir -p "$work/redis"
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$work/redis" --daemonize no --logfile "$work/redis/log" &
  redis_pid=$!
  pids+=("$redis_pid")
  for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p "$redis_port" ping >/dev/null || die "redis-server did not start"
}

# One store's 2x2 matrix; with a redis-server, its script calls per row.
matrix() { # ID-PREFIX NAME URL [REDIS-PORT]
  local rule k id s0 s1 a0 a1
  for rule in open closed; do
    for k in 1 "$keys"; do
      id="$1.$rule.$k"
      [[ -n "${4:-}" ]] && redis-cli -p "$4" config resetstat >/dev/null
      s0=$(sys_ticks "${sut[@]}") a0=$(sys_ticks "${aux[@]}")
      measure "$id" "$2 $rule $( ((k == 1)) && echo 'hot key' || echo "${k} keys")" \
        "$3" check.lua "$conns" -- tollgate "$rule" "$k"
      s1=$(sys_ticks "${sut[@]}") a1=$(sys_ticks "${aux[@]}")
      echo "$id|$round|$((s1 - s0))|$((a1 - a0))|$(awk '/requests in/ {print $1}' "$work/wrk-$id.$round.txt")" >>"$sys"
      if [[ -n "${4:-}" ]]; then
        echo "$id|$round|$(script_calls "$4")|$(awk '/requests in/ {print $1}' "$work/wrk-$id.$round.txt")" >>"$calls"
      fi
    done
  done
}

# The floor of each row (see the header): redis-benchmark's native
# command, CPU per command of redis-server and of the client (the
# subshell's children's ticks from /proc).
floor_rows() {
  local row cmd n=$((secs * 400000)) r0 r1 c
  start_redis_server
  # the denied 10k-key row reads keys that exist (its checks are denied
  # because their keys hold a day's TAT)
  redis-benchmark -p "$redis_port" -c 2 -P 32 -r "$keys" -n $((keys * 20)) -q \
    SET 'tollgate-bench:{closed:=k__rand_int__}:gcra' 1765012345678901 PX 86400000 >/dev/null
  for row in open.1 open.$keys closed.1 closed.$keys; do
    case $row in
      open.1 | closed.1) cmd=(GET 'tollgate-bench:{hot:=probe}:gcra') ;;
      open.*) cmd=(-r "$keys" SET 'tollgate-bench:{open:=k__rand_int__}:gcra' 1765012345678901 NX PX 1 GET) ;;
      closed.*) cmd=(-r "$keys" GET 'tollgate-bench:{closed:=k__rand_int__}:gcra') ;;
    esac
    redis-cli -p "$redis_port" config resetstat >/dev/null
    r0=$(proc_ticks "$redis_pid")
    c=$(
      redis-benchmark -p "$redis_port" -c 2 -P 32 -n "$n" -q "${cmd[@]}" >/dev/null
      read -r f <"/proc/$BASHPID/stat"
      f=${f##*) }
      set -- $f
      echo $((${14} + ${15}))
    )
    r1=$(proc_ticks "$redis_pid")
    echo "$row|$round|$((r1 - r0))|$c|$(redis-cli -p "$redis_port" info commandstats | tr -d '\r' |
      sed -nE 's/^cmdstat_(get|set):calls=([0-9]+),.*/\2/p' | awk '{ s += $1 } END { print s + 0 }')" >>"$floor"
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
    start_redis_server
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
    matrix "$store" "$store" "http://$addr" "$redis_port"
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
echo "tollgate $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (+ uncommitted changes in crates/)'); redis $(redis-server --version | grep -o 'v=[0-9.]*' | cut -d= -f2); load average before $load_before, after $load_after"
echo
# results: id|label|round|req/s|p50|p99|non2xx|srv|wrk|other|steal|errors|aux
python3 - "$results" "$calls" "$rounds" "$sys" "$hz" "$floor" <<'PY'
import sys, statistics
rows = [l.rstrip("\n").split("|") for l in open(sys.argv[1]) if l.strip()]
calls = {}
for l in open(sys.argv[2]):
    i, r, c, n = l.strip().split("|")
    calls[(i, r)] = (int(c), int(n))
rounds = int(sys.argv[3])
hz = float(sys.argv[5])
systime = {}
for l in open(sys.argv[4]):
    i, r, a, b, n = l.strip().split("|")
    systime[(i, r)] = (1e6 * int(a) / hz / max(1, int(n)), 1e6 * int(b) / hz / max(1, int(n)))
by = {}
for r in rows:
    by[(r[0], r[2])] = r
scen = ["open.1", "open.10000", "closed.1", "closed.10000"]
names = {"open.1": "admitted, hot key", "open.10000": "admitted, 10k keys",
         "closed.1": "denied, hot key", "closed.10000": "denied, 10k keys"}
def f(x):
    try: return float(x)
    except ValueError: return 0.0
def med(v):
    return statistics.median(v) if v else float("nan")
print(f"{'row':<20} {'store':<7} {'req/s':>9} {'p99 ms':>7} {'tollgate us':>11} {'(sys)':>6} {'redis us':>9} {'(sys)':>6} {'total us':>9} {'calls/check':>11} {'other':>6}   (medians over rounds)")
ratios = {}
for s in scen:
    for store in ["mem", "redis", "hybrid", "base"]:
        rs = [by[(f"{store}.{s}", str(k))] for k in range(1, rounds + 1) if (f"{store}.{s}", str(k)) in by]
        if not rs: continue
        tg = med([f(r[7]) for r in rs]); rd = med([f(r[12]) for r in rs]) if store != "mem" else 0.0
        tot = med([f(r[7]) + (f(r[12]) if store != "mem" else 0.0) for r in rs])
        cpc = med([calls[(f"{store}.{s}", r[2])][0] / max(1, calls[(f"{store}.{s}", r[2])][1]) for r in rs]) if store != "mem" else None
        ts = med([systime[(f"{store}.{s}", r[2])][0] for r in rs])
        rsy = med([systime[(f"{store}.{s}", r[2])][1] for r in rs])
        print(f"{names[s]:<20} {store:<7} {med([f(r[3]) for r in rs]):>9.0f} {med([f(r[5]) for r in rs]):>7.2f} {tg:>11.2f} {ts:>6.2f} "
              f"{(f'{rd:.2f}' if store != 'mem' else '-'):>9} {(f'{rsy:.2f}' if store != 'mem' else '-'):>6} {tot:>9.2f} {(f'{cpc:.4f}' if cpc is not None else '-'):>11} {med([f(r[9]) for r in rs]):>5.0f}%")
    for store in ["redis", "hybrid", "base"]:
        v = []
        for k in range(1, rounds + 1):
            m, o = by.get((f"mem.{s}", str(k))), by.get((f"{store}.{s}", str(k)))
            if m and o and f(m[7]) > 0:
                v.append((f(o[7]) + f(o[12])) / f(m[7]))
        ratios[(store, s)] = med(v)
print()
print(f"{'(tollgate + redis-server CPU) / memory CPU, median of per-round ratios':<72}")
print(f"{'store':<8} {'goal':>6} " + " ".join(f"{names[s]:>19}" for s in scen) + "   worst")
for store, goal in [("redis", 1.15), ("hybrid", None), ("base", None)]:
    if any(ratios[(store, s)] != ratios[(store, s)] for s in scen):
        continue  # not measured (NaN)
    v = [ratios[(store, s)] for s in scen]
    worst = max(v)
    verdict = "" if goal is None else ("met" if worst <= goal else "MISSED")
    print(f"{store:<8} {('<=' + str(goal)) if goal else '':>6} " + " ".join(f"{x:>19.2f}" for x in v) + f"   {worst:.2f} {verdict}")
# this tree's Redis rows against the base tree's, when measured
v = {}
for s in scen:
    r = []
    for k in range(1, rounds + 1):
        a, b = by.get((f"redis.{s}", str(k))), by.get((f"base.{s}", str(k)))
        if a and b and f(b[7]) + f(b[12]) > 0:
            r.append((f(a[7]) + f(a[12])) / (f(b[7]) + f(b[12])))
    if r: v[s] = med(r)
if v:
    print()
    print("Redis rows, (tollgate + redis-server CPU) this tree / base, median of per-round ratios:")
    print("         " + " ".join(f"{names[s]:>19}" for s in scen))
    print("         " + " ".join(f"{v.get(s, float('nan')):>19.2f}" for s in scen))
# the floor: one native command a check (see the header)
fl = {}
for l in open(sys.argv[6]):
    row, r, srv, cli, n = l.strip().split("|")
    n = max(1, int(n))
    fl[(row, r)] = (1e6 * int(srv) / hz / n, 1e6 * int(cli) / hz / n)
if fl:
    print()
    print("Floor: one native command a check, redis-benchmark -c 2 -P 32 (medians over rounds; ratio: (memory + redis-server + client) / memory, median of per-round ratios):")
    print(f"{'row':<20} {'command':<26} {'redis-server us':>15} {'client us':>9} {'ratio':>6}  {'Redis path, this tree':>21}")
    cmds = {"open.1": "GET (one key)", "open.10000": "SET NX PX 1 GET (10k)",
            "closed.1": "GET (one key)", "closed.10000": "GET (10k existing keys)"}
    for s in scen:
        rs = [str(k) for k in range(1, rounds + 1) if (s, str(k)) in fl]
        if not rs: continue
        srv = med([fl[(s, k)][0] for k in rs]); cli = med([fl[(s, k)][1] for k in rs])
        rat = med([(f(by[(f"mem.{s}", k)][7]) + fl[(s, k)][0] + fl[(s, k)][1]) / f(by[(f"mem.{s}", k)][7])
                   for k in rs if (f"mem.{s}", k) in by])
        print(f"{names[s]:<20} {cmds[s]:<26} {srv:>15.2f} {cli:>9.2f} {rat:>6.2f}  {ratios.get(('redis', s), float('nan')):>21.2f}")
PY
if [[ -n "$base_bin" ]]; then
  echo
  echo "base: the Redis rows with tollgate built at $base_sha (its own scripts and connection), same rounds"
fi
if [[ -s "$work/commandstats-redis.txt" ]]; then
  echo
  echo "redis-server's script calls in the Redis rows (last round, last row's stats: $(cat "$work/commandstats-redis.txt" | paste -sd' '))"
fi
