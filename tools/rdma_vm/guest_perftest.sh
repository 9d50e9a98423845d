#!/usr/bin/env bash
# Guest side of perftest.sh: runs INSIDE the Soft-RoCE VM (via run.sh). Runs
# ib_write_bw and ib_write_lat (perftest) with server and client in this guest on rxe0
# and prints one table row per run. Lines starting with '#' are comments/diagnostics.
# Columns (table and CSV): test bytes iters unit avg min max typical p99 status
#   ib_write_bw:  unit MiB/s, avg = BW average, max = BW peak
#   ib_write_bw_bidir: the same with -b (both directions at once), MiB/s summed over both
#   ib_write_lat: unit usec,  avg/min/max/typical/p99 = t_avg/t_min/t_max/t_typical/99%
# Meant to grow: more benchmarks (e.g. chorus's own) can append rows in the same boot.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: guest_perftest.sh [--bw-sizes LIST] [--bidir-sizes LIST] [--lat-sizes LIST] [--bw-iters N]
                         [--lat-iters N] [--csv FILE] [--dev DEV] [--gid-index N]
  LIST: comma-separated byte counts (plain numbers; run perftest.sh for K/M suffixes)
USAGE
}
bw_sizes=4194304,8388608,16777216,33554432,67108864
bidir_sizes=''
lat_sizes=8,16,32,64,128,256,512,1024,2048,4096
bw_iters=5 lat_iters=1000 csv='' dev=rxe0 gidx=1
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --bw-sizes|--bidir-sizes|--lat-sizes|--bw-iters|--lat-iters|--csv|--dev|--gid-index)
      [ $# -ge 2 ] || { echo "# guest_perftest.sh: $1 needs a value" >&2; usage >&2; exit 2; } ;;
    *) echo "# guest_perftest.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  case "$1" in
    --bw-sizes) bw_sizes=$2 ;;
    --bidir-sizes) bidir_sizes=$2 ;;
    --lat-sizes) lat_sizes=$2 ;;
    --bw-iters) bw_iters=$2 ;;
    --lat-iters) lat_iters=$2 ;;
    --csv) csv=$2 ;;
    --dev) dev=$2 ;;
    --gid-index) gidx=$2 ;;
  esac
  shift 2
done
for v in "$bw_iters" "$lat_iters" "$gidx"; do
  [[ "$v" =~ ^[0-9]+$ ]] || { echo "# guest_perftest.sh: '$v' is not a number" >&2; exit 2; }
done
[ "$bw_iters" -ge 5 ] && [ "$lat_iters" -ge 5 ] || { echo "# guest_perftest.sh: perftest needs at least 5 iterations" >&2; exit 2; }
for t in ib_write_bw ib_write_lat ss timeout; do
  command -v "$t" >/dev/null || { echo "# guest_perftest.sh: $t not found (apt-get install perftest iproute2)" >&2; exit 2; }
done

# perftest times with the TSC, which is not synchronized between TCG vCPUs: a process
# migrating between vCPUs mid-run reports garbage (seen: 0.00 MiB/s). Pin each side.
if [ "$(nproc)" -ge 2 ]; then srv_cpu=0 cli_cpu=1; else srv_cpu=0 cli_cpu=0; fi
pin=()
command -v taskset >/dev/null && pin=(taskset -c)

work=$(mktemp -d /tmp/guest_perftest.XXXXXX)
trap 'rm -rf "$work"' EXIT
port=18600
failures=0
pair_extra=()  # more perftest flags for both sides (measure_bidir)
header="test bytes iters unit avg min max typical p99 status"
fmt='%-13s %10s %6s %6s %9s %9s %9s %9s %9s %s\n'
# shellcheck disable=SC2086,SC2059  # the header splits into columns; fmt is ours
printf "$fmt" $header
if [ -n "$csv" ]; then
  mkdir -p "$(dirname "$csv")"
  echo "${header// /,}" >"$csv"
fi

emit() {  # test bytes iters unit avg min max typical p99 status ('' = not measured)
  local -a f=("$@") shown=()
  local x
  for x in "${f[@]}"; do shown+=("${x:--}"); done
  # shellcheck disable=SC2059
  printf "$fmt" "${shown[@]}"
  if [ -n "$csv" ]; then (IFS=,; echo "${f[*]}") >>"$csv"; fi
}

wait_listen() {  # $1 = port; bounded to 10 s
  local i
  for ((i = 0; i < 200; i++)); do
    ss -Hltn "sport = :$1" | grep -q . && return 0
    sleep 0.05
  done
  return 1
}

# run_pair TOOL SIZE ITERS LIMIT_S (on $port) -> client output in $work/client.log; returns != 0 on failure
run_pair() {
  local tool=$1 size=$2 iters=$3 limit=$4 srv src=0 crc=0
  local args=(-d "$dev" -x "$gidx" -F -s "$size" -n "$iters" -p "$port" ${pair_extra[@]+"${pair_extra[@]}"})
  timeout "$limit" ${pin[@]+"${pin[@]}" "$srv_cpu"} "$tool" "${args[@]}" >"$work/server.log" 2>&1 &
  srv=$!
  if ! wait_listen "$port"; then
    echo "# $tool -s $size: the server did not listen on port $port within 10 s" >&2
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
    sed 's/^/# server: /' "$work/server.log" | head -n 40 >&2
    return 1
  fi
  timeout "$limit" ${pin[@]+"${pin[@]}" "$cli_cpu"} "$tool" "${args[@]}" 127.0.0.1 >"$work/client.log" 2>&1 || crc=$?
  wait "$srv" || src=$?
  if [ "$crc" != 0 ] || [ "$src" != 0 ]; then
    echo "# $tool -s $size: client exit $crc, server exit $src (124 = timed out after ${limit} s)" >&2
    sed 's/^/# client: /' "$work/client.log" | head -n 40 >&2
    sed 's/^/# server: /' "$work/server.log" | head -n 40 >&2
    return 1
  fi
}

# The result row is the line right after the '#bytes' header.
result_line() { awk 'found && NF { print; exit } /#bytes/ { found = 1 }' "$work/client.log"; }

# Under TCG perftest's clock calibration occasionally yields nonsense (0.00, inf):
# a result is accepted only if all its numbers are finite and > 0; else retried once.
positive() {
  local x
  for x in "$@"; do
    [[ "$x" =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v v="$x" 'BEGIN { exit !(v > 0) }' || return 1
  done
}

measure_bw() {  # $1 = size; prints the row fields or returns 1
  local s=$1 b it peak avg _
  run_pair ib_write_bw "$s" "$bw_iters" 150 || return 1
  read -r b it peak avg _ <<<"$(result_line)" || true
  [ "${b:-}" = "$s" ] || { echo "# ib_write_bw -s $s: no result line in its output" >&2; return 1; }
  positive "$peak" "$avg" || { echo "# ib_write_bw -s $s: implausible result (avg '$avg', peak '$peak')" >&2; return 2; }
  echo "$it MiB/s $avg - $peak - -"
}
measure_bidir() { pair_extra=(-b); measure_bw "$1"; }  # called in a subshell: pair_extra stays local
measure_lat() {
  local s=$1 b it tmin tmax ttyp tavg _ p99
  run_pair ib_write_lat "$s" "$lat_iters" 60 || return 1
  read -r b it tmin tmax ttyp tavg _ p99 _ <<<"$(result_line)" || true
  [ "${b:-}" = "$s" ] || { echo "# ib_write_lat -s $s: no result line in its output" >&2; return 1; }
  positive "$tmin" "$tmax" "$ttyp" "$tavg" "$p99" ||
    { echo "# ib_write_lat -s $s: implausible result (t_avg '$tavg', t_typical '$ttyp')" >&2; return 2; }
  echo "$it usec $tavg $tmin $tmax $ttyp $p99"
}

run_sizes() {  # test measure_fn iters unit list
  local test=$1 fn=$2 iters=$3 unit=$4 s row attempt r
  local -a sizes f
  IFS=, read -r -a sizes <<<"$5"
  for s in "${sizes[@]}"; do
    if ! [[ "$s" =~ ^[1-9][0-9]*$ ]]; then
      echo "# $test: bad size '$s'" >&2
      failures=$((failures + 1))
      continue
    fi
    row='' r=0
    for attempt in 1 2; do
      r=0
      port=$((port + 1))  # a fresh port per run (set here: $fn runs in a subshell)
      row=$("$fn" "$s") || r=$?
      [ "$r" = 0 ] && break
      [ "$r" = 2 ] && [ "$attempt" = 1 ] && echo "# $test -s $s: retrying once" >&2 && continue
      break
    done
    if [ "$r" = 0 ]; then
      read -r -a f <<<"$row"
      for i in "${!f[@]}"; do [ "${f[$i]}" = - ] && f[i]=""; done
      emit "$test" "$s" "${f[@]}" ok
    else
      emit "$test" "$s" "$iters" "$unit" "" "" "" "" "" fail
      failures=$((failures + 1))
    fi
  done
}

run_sizes ib_write_bw measure_bw "$bw_iters" MiB/s "$bw_sizes"
run_sizes ib_write_bw_bidir measure_bidir "$bw_iters" MiB/s "$bidir_sizes"
run_sizes ib_write_lat measure_lat "$lat_iters" usec "$lat_sizes"

if [ "$failures" -gt 0 ]; then
  echo "# $failures measurement(s) failed" >&2
  exit 1
fi
exit 0
