#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for SECONDS each (default 20),
# starting from the committed seeds (fuzz/corpus/<target>/, copied to a
# temporary directory so the tree stays clean). Exits non-zero when any
# target crashes; the crashing input is kept in fuzz/artifacts/<target>/.
# Installs the nightly toolchain and cargo-fuzz when missing.
# docs/testing.md ("Fuzzing") says what each target feeds.
#
#   bash scripts/fuzz.sh [SECONDS]
#
# SECONDS=0 builds the targets and runs each over its seeds only.
# FUZZ_TARGET_DIR sets the build directory (default target/fuzz: the
# sanitizer builds share nothing with the normal ones).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$PWD/target/fuzz}"

if ! rustup toolchain list | grep -q '^nightly'; then
  echo "installing: the nightly toolchain"
  rustup toolchain install nightly --profile minimal
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "installing: cargo-fuzz"
  cargo install --locked cargo-fuzz
fi

# -a: debug assertions on, so an overflow is a crash too.
fuzz=(cargo +nightly fuzz)
"${fuzz[@]}" build -a

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=()
for target in $("${fuzz[@]}" list); do
  mkdir -p "$work/$target" "fuzz/artifacts/$target"
  cp fuzz/corpus/"$target"/* "$work/$target/"
  if [ "$seconds" -gt 0 ]; then
    limit=(-max_total_time="$seconds")
  else
    limit=(-runs=0)
  fi
  echo "fuzz: $target for ${seconds}s"
  start=$(date +%s)
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: a runaway
  # allocation is a crash. The log goes to a file; its tail on failure.
  # -seed: fixed (FUZZ_SEED, default 36), so that the test command explores
  # the same inputs on every run and a landing is never blocked by a find
  # that a random seed happened on; FUZZ_SEED=0 picks a random one, for
  # exploring (what it finds becomes a regression test and a fix).
  if "${fuzz[@]}" run -a "$target" "$work/$target" -- "${limit[@]}" \
    -seed="${FUZZ_SEED:-36}" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="fuzz/artifacts/$target/" >"$work/$target.log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$target.log")
    echo "fuzz: $target ok: ${runs:-?} runs in $(($(date +%s) - start))s"
  else
    grep -A 4 "panicked at" "$work/$target.log" | head -n 12 || true
    tail -n 20 "$work/$target.log"
    echo "fuzz: $target FAILED; the input is in fuzz/artifacts/$target/" >&2
    failed+=("$target")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz: crashes in: ${failed[*]}" >&2
  exit 1
fi
