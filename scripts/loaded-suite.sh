#!/usr/bin/env bash
# The test suite N times while every core is kept busy by another process:
# an assertion that leans on timing or scheduling luck fails here first
# (docs/testing.md, "No luck"). Prints one line per run and exits non-zero
# if any run failed; each run's output is kept in $OUT (default
# target/loaded-suite).
#
# Usage: scripts/loaded-suite.sh [N=5]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
out=${OUT:-target/loaded-suite}
mkdir -p "$out"
export CARGO_TERM_COLOR=never
cargo test --workspace --all-features --no-run -q 2>/dev/null
burners=()
stop() { for p in "${burners[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop EXIT
# one busy loop per core, at the tests' own priority
for _ in $(seq "$(nproc)"); do
  (while :; do :; done) &
  burners+=($!)
done
failed=0
for r in $(seq "$runs"); do
  start=$(date +%s)
  if cargo test --workspace --all-features --no-fail-fast >"$out/run-$r.log" 2>&1; then verdict=pass; else verdict=FAIL; failed=1; fi
  secs=$(( $(date +%s) - start ))
  passed=$(grep -o '[0-9]* passed' "$out/run-$r.log" | awk '{s+=$1} END {print s+0}')
  # the names of the failed tests (none: grep finds nothing, not an error)
  fails=$( { grep -E '^test .* \.\.\. FAILED$' "$out/run-$r.log" || true; } | awk '{print $2}' | sort -u | tr '\n' ' ')
  echo "run $r: $verdict in ${secs}s, $passed passed, load $(cut -d' ' -f1-3 /proc/loadavg)${fails:+, failed: $fails}"
done
exit "$failed"
