#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, every test. `.ci/run` calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
cargo fmt --all -- --check
# no two files (or top-level modules) of a crate import each other
python3 scripts/import_circles.py crates/*/src
cargo clippy --workspace --all-targets --all-features -- -D warnings
# the library builds without its optional features (no Redis)
cargo check -p tollgate --no-default-features
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --quiet
# lib, bins, integration tests, examples and doc tests (benches are built by clippy)
cargo test --workspace --all-features
# every parser of outside input under libFuzzer (fuzz/; docs/testing.md,
# "Fuzzing"): TOLLGATE_FUZZ_SECONDS per target, 0 to run the seeds only
bash scripts/fuzz.sh "${TOLLGATE_FUZZ_SECONDS:-20}"
