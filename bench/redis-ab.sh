#!/usr/bin/env bash
# The Redis store of this tree against the same store at an earlier
# commit, in ONE run against ONE redis-server: bench/tools/redis_load.rs of
# each tree (64 concurrent GCRA checks over one connection, 10k keys or one
# hot key), in alternating rounds, each printing its checks/s and client
# CPU per check, with redis-server's CPU per check (utime + stime from
# /proc) and script calls per check over the same run. The ratios (this
# tree / the other) are the median of the per-round ratios: the machine is
# shared, and each round measures both sides minutes apart at most.
#
# The store's protocol to Redis is part of what is compared (scripts,
# functions, batching): each tree runs its own.
#
# Usage: bench/redis-ab.sh COMMIT [SECONDS per run, default 5] [ROUNDS, default 3]
#   COMMIT is built once into target/bench-ab/<commit> (a git worktree under
#   target/, removed at the end; the build output is kept for the next run).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
commit="${1:?usage: bench/redis-ab.sh COMMIT [SECONDS] [ROUNDS]}"
secs="${2:-5}"
rounds="${3:-3}"
[[ "$secs" =~ ^[0-9]+$ && "$rounds" =~ ^[0-9]+$ ]] && ((secs >= 1 && rounds >= 1 && rounds <= 20)) ||
  { echo "usage: bench/redis-ab.sh COMMIT [SECONDS >= 1] [ROUNDS 1..20]" >&2; exit 2; }
sha=$(git rev-parse --verify --short "$commit^{commit}") || { echo "bench/redis-ab.sh: no commit $commit" >&2; exit 2; }
. bench/lib/redis.sh

cargo build --release -q --features redis -p tollgate --example redis_load
ours="$root/target/release/examples/redis_load"
base_dir="$root/target/bench-ab/$sha"
theirs="$base_dir/target/release/examples/redis_load"
if [[ ! -x "$theirs" ]]; then
  tree=$(mktemp -d)
  git worktree add -q --detach "$tree" "$sha"
  echo "# building redis_load at $sha (once; kept in $base_dir)" >&2
  mkdir -p "$base_dir"
  (cd "$tree" && CARGO_TARGET_DIR="$base_dir/target" cargo build --release -q --features redis -p tollgate --example redis_load)
  git worktree remove --force "$tree"
fi
start_redis

ticks() { awk '{ print $14 + $15 }' "/proc/$redis_pid/stat"; }
calls() { redis-cli -p "$port" info commandstats | tr -d '\r' | awk -F'[=,:]' '
  /^cmdstat_(fcall|evalsha|eval):/ { c += $3 } END { print c + 0 }'; }
hz=$(getconf CLK_TCK)
results=$(mktemp)
trap 'kill $redis_pid 2>/dev/null; rm -rf "$redis_dir" "$results"' EXIT

# run LABEL BIN KEYS: one run; appends label|keys|round|rps|client us|redis us|calls/check
run() {
  redis-cli -p "$port" flushall >/dev/null
  redis-cli -p "$port" config resetstat >/dev/null
  local t0 t1 out checks
  t0=$(ticks)
  out=$("$2" "redis://127.0.0.1:$port" 64 "$secs" "$3")
  t1=$(ticks)
  checks=$(echo "$out" | sed -E 's/.*checks=([0-9]+).*/\1/')
  python3 - "$1" "$3" "$round" "$out" "$((t1 - t0))" "$hz" "$checks" "$(calls)" >>"$results" <<'PY'
import re, sys
label, keys, rnd, out, ticks, hz, checks, calls = sys.argv[1:]
checks = int(checks)
rps = re.search(r'rps=([0-9.]+)', out)[1]
cpu = re.search(r'client_cpu_us_per_check=([0-9.]+)', out)[1]
print(f"{label}|{keys}|{rnd}|{rps}|{cpu}|{1e6 * int(ticks) / float(hz) / checks:.3f}|{int(calls) / checks:.4f}")
PY
}

for ((round = 1; round <= rounds; round++)); do
  for keys in 10000 1; do
    run this "$ours" "$keys"
    run "$sha" "$theirs" "$keys"
  done
done

echo "bench/redis-ab.sh $commit $secs $rounds: redis_load, 64 concurrent GCRA checks, one connection; this tree $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (+ uncommitted changes)') against $sha"
python3 - "$results" "$sha" <<'PY'
import statistics, sys
rows = [l.strip().split("|") for l in open(sys.argv[1]) if l.strip()]
base = sys.argv[2]
def med(v): return statistics.median(v)
print(f"{'keys':>6} {'tree':<9} {'checks/s':>10} {'client us':>10} {'redis us':>9} {'total us':>9} {'calls/check':>12}   (medians over rounds)")
for keys in ["10000", "1"]:
    for label in ["this", base]:
        rs = [r for r in rows if r[0] == label and r[1] == keys]
        print(f"{keys:>6} {label:<9} {med([float(r[3]) for r in rs]):>10.0f} {med([float(r[4]) for r in rs]):>10.3f} "
              f"{med([float(r[5]) for r in rs]):>9.3f} {med([float(r[4]) + float(r[5]) for r in rs]):>9.3f} {med([float(r[6]) for r in rs]):>12.4f}")
print()
print("this tree / the other, median of per-round ratios:")
for keys in ["10000", "1"]:
    by = {}
    for r in rows:
        if r[1] == keys: by[(r[0], r[2])] = r
    rounds = sorted({r[2] for r in rows})
    def ratio(i, add=False):
        v = []
        for k in rounds:
            a, b = by.get(("this", k)), by.get((base, k))
            if a and b:
                x = float(a[4]) + float(a[5]) if add else float(a[i])
                y = float(b[4]) + float(b[5]) if add else float(b[i])
                if y > 0: v.append(x / y)
        return med(v) if v else float("nan")
    print(f"  {keys:>5} keys: checks/s {ratio(3):.2f}, client CPU {ratio(4):.2f}, redis-server CPU {ratio(5):.2f}, total CPU {ratio(0, True):.2f}")
PY
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
