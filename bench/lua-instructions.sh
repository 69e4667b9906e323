#!/usr/bin/env bash
# redis-server instructions per check inside tollgate's batched checks
# (batch mode, see crates/tollgate/src/store/redis/scripts/check.lua),
# counted by callgrind: an instruction count does not move with the shared
# machine's load, so this is how changes to the scripts are judged. Three
# workloads: batches on one hot key, on KEYS random keys (admitted: each
# check creates its key), and on KEYS existing keys, every check denied.
#
# Usage: bench/lua-instructions.sh [BATCH=20] [RUNS=500] [KEYS=10000] [SCRIPT]
#   SCRIPT: a composed file (default: the function library of this tree,
#           run with FCALL, as the store composes it: see scripts.rs);
#           with VIA=script, the GCRA script run with EVALSHA (what a
#           Redis without functions runs)
set -euo pipefail
batch=${1:-20} runs=${2:-500} keys=${3:-10000} script=${4:-}
[[ "$batch" =~ ^[0-9]+$ && "$runs" =~ ^[0-9]+$ && "$keys" =~ ^[0-9]+$ ]] &&
  ((batch >= 2 && batch <= 255 && runs >= 50 && runs % 50 == 0 && keys >= 1)) ||
  { echo "usage: bench/lua-instructions.sh [BATCH 2..255] [RUNS, a multiple of 50] [KEYS >= 1] [SCRIPT]" >&2; exit 2; }
source "$(dirname "$0")/lib/common.sh"
for tool in valgrind:valgrind redis-server:redis-server redis-cli:redis-tools python3:python3; do
  need_pkg "${tool%%:*}" "${tool#*:}"
done
toggle=fcallCommand
if [[ -z "$script" ]]; then
  s=crates/tollgate/src/store/redis/scripts
  script=$work/script.lua
  if [[ "${VIA:-function}" == script ]]; then
    { echo 'local EVAL = true'; cat "$s/prelude.lua" "$s/gcra.lua" "$s/check.lua"
      echo 'return main(KEYS, ARGV)'; } >"$script"
  else
    { echo '#!lua name=tollgate_bench'; echo 'local EVAL = false'
      cat "$s"/{prelude,gcra,token_bucket,fixed_window,sliding_window,sliding_log,concurrency,check}.lua
      echo "redis.register_function('tollgate_bench', main)"; } >"$script"
  fi
fi
head -c 5 "$script" | grep -q '#!lua' || toggle=evalShaCommand
# count WORKLOAD-KEYS: one callgrind run of redis-server, only FCALL (or EVALSHA) counted.
count() {
  local k=$1 port vpid
  port=$(free_port)
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" --collect-atstart=no \
    --toggle-collect=$toggle redis-server --port "$port" --bind 127.0.0.1 --save "" \
    --appendonly no --dir "$work" >/dev/null 2>"$work/valgrind.log" &
  vpid=$!
  pids+=("$vpid")
  for _ in $(seq 150); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  python3 bench/lua/batch.py "$port" "$script" "$batch" "$k" "$runs" >/dev/null
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  stop "$vpid"
  # batch.py runs RUNS counted runs plus one first run, all inside FCALL (EVALSHA)
  echo "batches of $batch on $( ((k == 1)) && echo "one hot key" || echo "$k keys")${DENIED:+ that exist, denied}: $(benchstat callgrind --per $(((runs + 1) * batch)) "$work/cg.out") instructions a check"
}
count 1
count "$keys"
# the same keys existing, every check denied (bench/http's closed rule)
DENIED=1 count "$keys"
