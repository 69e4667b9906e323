#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, every test. `.ci/run` calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
# what the tests need and this machine lacks (apt and pip: run as root)
bash scripts/install-deps.sh
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
cargo fmt --all -- --check
# no two files (or top-level modules) of a crate import each other
python3 scripts/import_circles.py crates/*/src
# every relative link and anchor in the README and docs/ resolves
python3 scripts/doc_links.py
cargo clippy --workspace --all-targets --all-features -- -D warnings
# the library builds without its optional features (no Redis)
cargo check -p tollgate --no-default-features
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --quiet
# lib, bins, integration tests, examples and doc tests (benches are built by clippy)
cargo test --workspace --all-features
# the Redis store's suites again on Valkey (docs/redis-store.md#servers):
# the harness starts valkey-server instead of redis-server
# (one test binary per crate, `it`: a suite is a module, picked by its path)
TOLLGATE_REDIS_SERVER=valkey cargo test -p redis-harness --test it
TOLLGATE_REDIS_SERVER=valkey cargo test -p tollgate --all-features --test it -- \
  conformance_redis:: redis_batches:: redis_topologies:: faults::
# a live `tollgate serve` held to crates/tollgate-server/openapi.json by
# schemathesis (docs/http-api.md#openapi)
bash scripts/api-fuzz.sh
# the Helm chart rendered by Helm v4 for its value sets, every object
# checked against the Kubernetes schemas, its config by `tollgate validate`,
# deploy/kubernetes/ up to date (deploy/test-chart.py)
cargo build -p tollgate-server
python3 deploy/test-chart.py
# the container image built and run under podman as Kubernetes runs it,
# and the systemd unit verified (docs/container.md#the-test)
bash deploy/test-image.sh
# the published crates package (verify build included) and install:
# `cargo install --path crates/tollgate-server` gives a working tollgate
bash scripts/package-check.sh
# every parser of outside input under libFuzzer (fuzz/; docs/testing.md,
# "Fuzzing"): TOLLGATE_FUZZ_SECONDS per target, 0 to run the seeds only
bash scripts/fuzz.sh "${TOLLGATE_FUZZ_SECONDS:-20}"
