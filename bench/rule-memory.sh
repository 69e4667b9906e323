#!/usr/bin/env bash
# What a rule costs `tollgate serve` in memory (docs/operations.md, "What a
# rule costs"): serve a config of RULES GCRA rules (limit 10 per second,
# keyed on a header, as issue 36 measured), wait until the HTTP API
# answers, check one rule, scrape /metrics once, and read the process's
# VmHWM (the most resident memory it ever had: the load's peak) and VmRSS
# (resident now) from /proc. The same for a config of one rule, and each
# difference divided by RULES - 1 is printed as bytes per rule.
#
# Usage: bench/rule-memory.sh [RULES, default 100000]
# Env:   PROFILE=debug builds and measures the debug binary (default
#        release); TOLLGATE=path/to/tollgate uses that binary.
set -euo pipefail
rules="${1:-100000}"
[[ "$rules" =~ ^[0-9]+$ ]] && ((rules >= 2)) ||
  { echo "usage: bench/rule-memory.sh [RULES >= 2]" >&2; exit 2; }
source "$(dirname "$0")/lib/common.sh"
profile="${PROFILE:-release}"
if [[ -n "${TOLLGATE:-}" ]]; then
  tollgate=$TOLLGATE
else
  flag=(); [[ "$profile" == release ]] && flag=(--release)
  # The executable cargo names for this tree: in a target folder shared
  # by several work trees, target/PROFILE/tollgate is whichever tree's
  # build was copied there last.
  exe=$(cargo build "${flag[@]}" -q -p tollgate-server --bin tollgate --message-format=json |
    grep -o '"executable":"[^"]*tollgate[^"]*"' | tail -1 | sed 's/.*:"//; s/"$//')
  [[ -x "$exe" ]] || { echo "bench/rule-memory.sh: no tollgate executable built" >&2; exit 1; }
  cp "$exe" "$work/tollgate"
  tollgate="$work/tollgate"
fi

config() { # N FILE
  awk -v n="$1" 'BEGIN {
    print "[store]\nmax_keys = 1000"
    for (i = 0; i < n; i++)
      printf "\n[[rules]]\nname = \"r%d\"\nalgorithm = \"gcra\"\nlimit = 10\nperiod = \"1s\"\nkey = \"header:x-k\"\n", i
  }' > "$2"
}

# kib N: serves N rules; prints "VmHWM VmRSS" in KiB (benchstat mem).
kib() {
  config "$1" "$work/rules.toml"
  start_tollgate "rules$1" --config "$work/rules.toml" --http 127.0.0.1:0 --reload-poll 0s
  wait_http "http://$addr/readyz"
  curl -s -o /dev/null -H 'content-type: application/json' \
    -d '{"rule":"r0","key":"k"}' "http://$addr/v1/check"
  curl -s -o /dev/null "http://$addr/metrics"
  benchstat mem "$pid"
  stop "$pid"
}

read -r hwm1 rss1 < <(kib 1)
read -r hwm rss < <(kib "$rules")
log "$profile binary $tollgate"
printf '%-8s %12s %12s\n' "" "VmHWM KiB" "VmRSS KiB"
printf '%-8s %12s %12s\n' "1 rule" "$hwm1" "$rss1"
printf '%-8s %12s %12s\n' "$rules" "$hwm" "$rss"
echo "per rule: $(( (hwm - hwm1) * 1024 / (rules - 1) )) bytes at the peak (VmHWM), $(( (rss - rss1) * 1024 / (rules - 1) )) held (VmRSS)"
