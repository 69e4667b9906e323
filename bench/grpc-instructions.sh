#!/usr/bin/env bash
# Instructions per call of `tollgate serve --grpc` (user space, all
# threads), counted by callgrind, as bench/http-instructions.sh counts the
# HTTP doors: the machine is shared and noisy, and an instruction count does
# not move with the load, so this is how code changes to the gRPC door are
# judged (bench/grpc.sh gives the calls/s, latencies and CPU per call).
#
# The server runs under valgrind on the memory store with bench/grpc's
# limits; grpc_load sends warm-up calls (not counted), callgrind's counters
# are zeroed, then CONC callers x EACH calls are sent over one HTTP/2
# connection and counted.
#
# Usage: bench/grpc-instructions.sh [SCENARIO=open-hot] [EACH=50] [CONC=64] [BIN]
#   SCENARIO: open-hot | open-10k | closed-hot (domain bench or bench_closed,
#             one key or 10k keys)
#   BIN:      the tollgate binary (default target/release/tollgate, built here;
#             target/profiling/tollgate, from `cargo build --profile profiling`,
#             has the line tables callgrind_annotate attributes lines with)
# Env: BENCH_KEEP=DIR keeps the callgrind output (callgrind_annotate reads it).
set -euo pipefail
scenario=${1:-open-hot} each=${2:-50} conc=${3:-64} bin=${4:-}
case $scenario in
  open-hot) domain=bench keys=1 ;;
  open-10k) domain=bench keys=10000 ;;
  closed-hot) domain=bench_closed keys=1 ;;
  *) echo "usage: bench/grpc-instructions.sh [open-hot|open-10k|closed-hot] [EACH] [CONC] [BIN]" >&2; exit 2 ;;
esac
source "$(dirname "$0")/lib/common.sh"
need_pkg valgrind valgrind
cargo build --release -q -p tollgate-server --bin tollgate --example grpc_load
[[ -n "$bin" ]] || bin=$target/release/tollgate
load=$target/release/examples/grpc_load
printf '[store]\nurl = "memory"\n' >"$work/t.toml"
valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" "$bin" serve --config "$work/t.toml" \
  --grpc 127.0.0.1:0 --envoy-config bench/grpc/rls.yaml --envoy-config bench/grpc/rls-closed.yaml \
  >"$work/log" 2>&1 &
pid=$!
pids+=("$pid")
addr=
for _ in $(seq 600); do
  addr=$(grep -o 'gRPC) listening on [0-9.:]*' "$work/log" | head -1 | sed 's|.* ||' || true)
  [[ -n "$addr" ]] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
[[ -n "$addr" ]] || { cat "$work/log" >&2; die "tollgate logged no gRPC address"; }
"$load" "$addr" "$conc" 1 "$keys" "$domain" 20 >/dev/null
callgrind_control -z "$pid" >/dev/null 2>&1
"$load" "$addr" "$conc" 1 "$keys" "$domain" "$each" >/dev/null
callgrind_control -d "$pid" >/dev/null 2>&1
sleep 0.5
out="$work/cg.$pid.1"
n=$((conc * each))
echo "$scenario: $(benchstat callgrind --per "$n" "$out") instructions per call ($(benchstat callgrind "$out") over $n calls, $conc callers on one connection)"
