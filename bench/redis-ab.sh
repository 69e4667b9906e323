#!/usr/bin/env bash
# The Redis store of this tree against the same store at an earlier
# commit, in ONE run against ONE redis-server: bench/tools/redis_load.rs of
# each tree (64 concurrent GCRA checks over one connection, 10k keys or one
# hot key), in alternating rounds, each printing its checks/s and client
# CPU per check, with redis-server's CPU per check (utime + stime from
# /proc) and script calls per check over the same run. The ratios (this
# tree / the other) are the median of the per-round ratios: the machine is
# shared, and each round measures both sides minutes apart at most
# (benchstat does the statistics: bench/lib/common.sh).
#
# The store's protocol to Redis is part of what is compared (scripts,
# functions, batching): each tree runs its own.
#
# Usage: bench/redis-ab.sh COMMIT [SECONDS per run, default 5] [ROUNDS, default 3]
#   COMMIT is built once into target/bench-ab/<commit> (a git worktree under
#   target/, removed at the end; the build output is kept for the next run).
set -euo pipefail
commit="${1:?usage: bench/redis-ab.sh COMMIT [SECONDS] [ROUNDS]}"
secs="${2:-5}"
rounds="${3:-3}"
[[ "$secs" =~ ^[0-9]+$ && "$rounds" =~ ^[0-9]+$ ]] && ((secs >= 1 && rounds >= 1 && rounds <= 20)) ||
  { echo "usage: bench/redis-ab.sh COMMIT [SECONDS >= 1] [ROUNDS 1..20]" >&2; exit 2; }
source "$(dirname "$0")/lib/common.sh"
sha=$(git rev-parse --verify --short "$commit^{commit}") || die "no commit $commit"

cargo build --release -q --features redis -p tollgate --example redis_load
ours="$target/release/examples/redis_load"
base_dir="$target/bench-ab/$sha"
theirs="$base_dir/target/release/examples/redis_load"
if [[ ! -x "$theirs" ]]; then
  wt=$(mktemp -d)
  git worktree add -q --detach "$wt" "$sha"
  log "building redis_load at $sha (once; kept in $base_dir)"
  mkdir -p "$base_dir"
  (cd "$wt" && CARGO_TARGET_DIR="$base_dir/target" cargo build --release -q --features redis -p tollgate --example redis_load)
  git worktree remove --force "$wt"
fi
start_redis
results="$work/results"

# run TREE BIN KEYS: one run, with redis-server's CPU per check ("srv") and
# its script calls.
run() {
  local calls
  redis-cli -p "$redis_port" flushall >/dev/null
  redis-cli -p "$redis_port" config resetstat >/dev/null
  benchstat run --results "$results" --id "$1.$3" --round "$round" --label "$( (($3 == 1)) && echo 'one key' || echo "$3 keys"), $1" --sut "$redis_pid" \
    --parse kv --count checks -- "$2" "redis://127.0.0.1:$redis_port" 64 "$secs" "$3"
  read -r calls _ < <(script_calls "$redis_port")
  benchstat put "$results" "$1.$3" "$round" "calls=$calls"
}

for ((round = 1; round <= rounds; round++)); do
  for keys in 10000 1; do
    run this "$ours" "$keys"
    run base "$theirs" "$keys"
  done
done

echo "bench/redis-ab.sh $commit $secs $rounds: redis_load, 64 concurrent GCRA checks, one connection; this tree $(tree) against base $sha"
client=client_cpu_us_per_check
benchstat table "$results" --label 'keys, tree (medians over rounds)' --col 'checks/s' rps 0 \
  --col 'client us' "$client" 3 --col 'redis us' srv 3 --col 'total us' "$client + srv" 3 \
  --col 'calls/check' 'calls / n' 4
echo
benchstat ratios "$results" --title 'this tree / base, median of per-round ratios' \
  --col '10k keys' .10000 --col 'one key' .1 \
  --row 'checks/s' 'this{} / base{}' - \
  --row 'client CPU' "this{}:$client / base{}:$client" - \
  --row 'redis-server CPU' 'this{}:srv / base{}:srv' - \
  --row 'total CPU' "this{}:$client + this{}:srv / base{}:$client + base{}:srv" -
echo "client us: redis_load's own CPU per check; redis us: redis-server's (utime + stime, /proc)."
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
