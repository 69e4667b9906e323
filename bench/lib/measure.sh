# Sourced by bench/http.sh and bench/grpc.sh: tools, processes and the CPU
# figures from /proc they share. The sourcing script sets $work (its
# scratch folder), the array pids=() (every process it started, stopped on
# exit) and, for start_tollgate, $tollgate (the binary).

log() { echo "# $*" >&2; }
die() { echo "bench/${0##*/}: $*" >&2; exit 1; }

# --- tools -------------------------------------------------------------------
apt_updated=
need_pkg() { # COMMAND PACKAGE
  command -v "$1" >/dev/null && return
  log "installing $2 (apt-get)"
  if [[ -z "$apt_updated" ]]; then apt-get update -qq >/dev/null; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
  command -v "$1" >/dev/null || die "$2 did not install $1"
}

# stop PID: ends one process started here and waits for it (5 s, then KILL).
stop() {
  local pid=$1 p rest=()
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  for p in "${pids[@]}"; do [[ "$p" == "$pid" ]] || rest+=("$p"); done
  pids=("${rest[@]}")
}

# A loopback port no socket uses, below the ephemeral range (so no client
# connection can take it meanwhile). tollgate itself binds port 0.
free_port() {
  local p lo
  lo=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  for _ in $(seq 100); do
    p=$((10000 + RANDOM % (lo - 10000)))
    [[ -z "$(ss -Htan "sport = :$p")" ]] && { echo "$p"; return; }
  done
  die "no free port"
}

# wait_http URL: until URL answers 200 (10 s at most).
wait_http() {
  local code
  for _ in $(seq 100); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$1" || true)
    [[ "$code" == 200 ]] && return 0
    sleep 0.1
  done
  die "$1 not ready (last status ${code:-none})"
}

# start_tollgate NAME ARGS...: runs `tollgate serve ARGS` (or, with
# BIN=PATH, `PATH ARGS`); sets $pid and $addr, the address of the front
# door it logs.
start_tollgate() {
  local name=$1; shift
  if [[ -n "${BIN:-}" ]]; then "$BIN" "$@" >"$work/$name.log" 2>&1 &
  else "$tollgate" serve "$@" >"$work/$name.log" 2>&1 &
  fi
  pid=$!
  pids+=("$pid")
  addr=
  for _ in $(seq 100); do
    addr=$(grep -o 'listening on http://[0-9.:]*' "$work/$name.log" | head -1 | sed 's|.*http://||' || true)
    [[ -n "$addr" ]] && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$work/$name.log" >&2; die "tollgate serve ($name) exited"; }
    sleep 0.1
  done
  cat "$work/$name.log" >&2
  die "tollgate serve ($name) logged no address"
}

# to_ms VALUE: wrk's "812.00us" / "1.20ms" / "1.01s" in milliseconds.
to_ms() {
  awk -v v="$1" 'BEGIN { n = v + 0
    if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /s$/) n *= 1000
    printf "%.3f", n }'
}
# stat_ticks all|sys PID...: clock ticks the processes have used, user
# and system ("all") or system only ("sys": the kernel's share, sockets
# and wake-ups).
stat_ticks() {
  local which=$1 t=0 p f
  shift
  for p in "$@"; do
    f=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    f=${f##*) }  # past "pid (comm) "
    set -- $f
    if [[ $which == sys ]]; then t=$((t + ${13})); else t=$((t + ${12} + ${13})); fi
  done
  echo "$t"
}

# proc_ticks PID...: user+system clock ticks the processes have used.
proc_ticks() { stat_ticks all "$@"; }

# sys_ticks PID...: system-time clock ticks the processes have used.
sys_ticks() { stat_ticks sys "$@"; }
# cpu_ticks: "busy total steal" clock ticks of the whole machine.
cpu_ticks() {
  awk '$1 == "cpu" { print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9, $9 }' /proc/stat
}

# wait_quiet: the machine is shared (other engineers build on it); before a
# run, wait until the cores have been mostly idle for a second (under
# $quiet_busy % busy), for at most $quiet_wait seconds; the "other" column
# then shows how quiet the run itself was.
quiet_busy="${BENCH_QUIET_BUSY:-25}"
quiet_wait="${BENCH_QUIET_WAIT:-60}"
wait_quiet() {
  local a b waited=0 busy
  while :; do
    read -r -a a <<<"$(cpu_ticks)"
    sleep 1
    read -r -a b <<<"$(cpu_ticks)"
    busy=$(( (b[1] > a[1]) ? 100 * (b[0] - a[0]) / (b[1] - a[1]) : 0 ))
    ((busy < quiet_busy)) && return 0
    ((waited == 0)) && log "machine ${busy}% busy: waiting up to ${quiet_wait}s for it to quieten"
    ((++waited >= quiet_wait)) && { log "still ${busy}% busy; measuring anyway"; return 0; }
  done
}

# cpu_begin / cpu_end: around one load run, the CPU ticks of the server
# under test (the array sut), of what it leans on (aux) and of the machine.
cpu_begin() {
  _sut0=$(proc_ticks "${sut[@]}")
  _aux0=$(proc_ticks "${aux[@]}")
  read -r -a _m0 <<<"$(cpu_ticks)"
}
cpu_end() {
  read -r -a _m1 <<<"$(cpu_ticks)"
  _sut1=$(proc_ticks "${sut[@]}")
  _aux1=$(proc_ticks "${aux[@]}")
}
# cpu_row ID LABEL REQ/S P50 P99 REQUESTS NON-2XX LOAD-CPU-SECONDS [ERRORS]:
# appends the run's row to $results (round $round):
#   id|label|round|req/s|p50|p99|non2xx %|srv us/r|load us/r|other %|steal %|errors|aux us/r
# CPU: the server's per request (us, from /proc/PID/stat: utime + stime),
# its helper's, the load generator's, the share of the machine that none
# of them used (other engineers' builds...), steal.
cpu_row() {
  awk -v hz="$hz" -v n="$6" -v non="$7" -v s0="$_sut0" -v s1="$_sut1" \
    -v x0="$_aux0" -v x1="$_aux1" -v has_aux="${#aux[@]}" \
    -v b0="${_m0[0]}" -v b1="${_m1[0]}" -v a0="${_m0[1]}" -v a1="${_m1[1]}" -v st0="${_m0[2]}" -v st1="${_m1[2]}" \
    -v wrkcpu="$8" -v row="$1|$2|$round|$3|$4|$5" -v errors="${9:-}" 'BEGIN {
      srv = (s1 - s0) / hz; ax = (x1 - x0) / hz; busy = (b1 - b0) / hz; all = (a1 - a0) / hz
      other = (all > 0) ? 100 * (busy - srv - ax - wrkcpu) / all : 0
      if (other < 0) other = 0
      printf "%s|%.1f|%.2f|%.2f|%.0f|%.0f|%s|%s\n", row, 100 * non / n, 1e6 * srv / n, 1e6 * wrkcpu / n,
        other, (all > 0) ? 100 * (st1 - st0) / (a1 - a0) : 0, errors,
        has_aux ? sprintf("%.2f", 1e6 * ax / n) : "-" }' >>"$results"
}

# measure ID LABEL URL SCRIPT CONNECTIONS -- SCRIPT-ARGS...: one wrk run;
# appends a row to $results (uses $threads, $secs, $root/bench/http/SCRIPT).
measure() {
  local id=$1 label=$2 url=$3 script=$4 c=$5; shift 6
  local t=$threads out
  ((c < t)) && t=$c
  wait_quiet
  log "round $round: $label: wrk -t$t -c$c -d${secs}s $url"
  out="$work/wrk-$id.$round.txt"
  cpu_begin
  local TIMEFORMAT='%U %S'
  { time timeout $((secs + 30)) wrk -t"$t" -c"$c" -d"${secs}s" --latency --timeout 2s \
      -s "$root/bench/http/$script" "$url" -- "$@" >"$out" 2>&1; } 2>"$out.time" ||
    { cat "$out" >&2; die "wrk failed on $label"; }
  cpu_end
  local rps p50 p99 total non2xx errors
  rps=$(awk '/^Requests\/sec:/ {print $2}' "$out")
  p50=$(to_ms "$(awk '$1 == "50%" {print $2}' "$out")")
  p99=$(to_ms "$(awk '$1 == "99%" {print $2}' "$out")")
  total=$(awk '/requests in/ {print $1}' "$out")
  non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$out")
  errors=$(awk '/Socket errors:/ {sub(/.*Socket errors: /, ""); print}' "$out")
  [[ -n "$rps" && -n "$total" && "$total" -gt 0 ]] || { cat "$out" >&2; die "no result from wrk on $label"; }
  cpu_row "$id" "$label" "$rps" "$p50" "$p99" "$total" "${non2xx:-0}" "$(awk '{print $1 + $2}' "$out.time")" "${errors:-}"
}
